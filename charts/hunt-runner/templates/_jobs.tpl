{{/*
The pod of a one-shot hunt-runner command (materialise, schema). Call with
(dict "ctx" $ "component" C "args" LIST "user" U "secret" S "key" K "source" BOOL "resources" R "preHook" BOOL).
*/}}
{{- define "hunt-runner.jobPod" -}}
{{- $ := .ctx -}}
metadata:
  labels:
    {{- include "hunt-runner.labels" (dict "ctx" $ "component" .component) | nindent 4 }}
spec:
  {{- include "hunt-runner.podCommonWith" (dict "ctx" $ "preHook" .preHook) | nindent 2 }}
  restartPolicy: Never
  containers:
    - name: {{ .component }}
      image: {{ include "hunt-runner.image" $ | quote }}
      imagePullPolicy: {{ $.Values.image.pullPolicy }}
      args:
        {{- toYaml .args | nindent 8 }}
      env:
        {{- include "hunt-runner.clickhouseEnv" (dict "ctx" $ "user" .user "secret" .secret "key" .key) | nindent 8 }}
        {{- if .source }}
        {{- with (include "hunt-runner.sourceEnv" $ | trim) }}{{ . | nindent 8 }}{{ end }}
        {{- end }}
      {{- with .resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $.Values.securityContext | nindent 8 }}
      volumeMounts:
        {{- include "hunt-runner.commonVolumeMounts" $ | nindent 8 }}
        {{- with (include "hunt-runner.passwordVolumeMount" (dict "name" "clickhouse-password" "path" "/etc/hunt-runner/clickhouse-password" "secret" .secret) | trim) }}{{ . | nindent 8 }}{{ end }}
        {{- if .source }}
        {{- with (include "hunt-runner.sourceVolumeMounts" $ | trim) }}{{ . | nindent 8 }}{{ end }}
        {{- end }}
  volumes:
    {{- include "hunt-runner.commonVolumes" $ | nindent 4 }}
    {{- with (include "hunt-runner.passwordVolume" (dict "name" "clickhouse-password" "secret" .secret "key" .key) | trim) }}{{ . | nindent 4 }}{{ end }}
    {{- if .source }}
    {{- with (include "hunt-runner.sourceVolumes" $ | trim) }}{{ . | nindent 4 }}{{ end }}
    {{- end }}
  {{- with $.Values.huntRunner.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $.Values.huntRunner.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* A changed schedule is success in a Job. materialise exits 0 for it since --detailed-exitcode
     came in; the flag keeps images from before that (which exited 3) working with this chart. */}}
{{- define "hunt-runner.materialiseArgs" -}}
- materialise
- --changed-exit-code=0
{{- end -}}
