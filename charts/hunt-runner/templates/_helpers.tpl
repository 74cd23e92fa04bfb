{{/*
Names. The runner, the shim and the Jobs share one prefix and differ by suffix and by the
app.kubernetes.io/component label, which every selector includes: a Service of one component
never routes to the pods of another.
*/}}
{{- define "hunt-runner.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hunt-runner.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Suffixed names are cut so that the suffix always survives the 63-character limit. */}}
{{- define "hunt-runner.shimName" -}}
{{- printf "%s-shim" (include "hunt-runner.fullname" . | trunc 58 | trimSuffix "-") -}}
{{- end -}}
{{- define "hunt-runner.materialiseName" -}}
{{- printf "%s-materialise" (include "hunt-runner.fullname" . | trunc 51 | trimSuffix "-") -}}
{{- end -}}
{{- define "hunt-runner.schemaName" -}}
{{- printf "%s-schema" (include "hunt-runner.fullname" . | trunc 56 | trimSuffix "-") -}}
{{- end -}}
{{- define "hunt-runner.huntsConfigMapName" -}}
{{- if .Values.hunts.configMap.existing -}}
{{- .Values.hunts.configMap.existing -}}
{{- else -}}
{{- printf "%s-hunts" (include "hunt-runner.fullname" . | trunc 57 | trimSuffix "-") -}}
{{- end -}}
{{- end -}}

{{- define "hunt-runner.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hunt-runner.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "hunt-runner.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels: call with (dict "ctx" $ "component" "runner"). */}}
{{- define "hunt-runner.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hunt-runner.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "hunt-runner.labels" -}}
{{ include "hunt-runner.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: hunt-runner
helm.sh/chart: {{ include "hunt-runner.chart" .ctx }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "hunt-runner.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Is the shim rendered? Whenever the metrics-api trigger needs it, or on request. */}}
{{- define "hunt-runner.shimEnabled" -}}
{{- $a := .Values.huntRunner.autoscaling -}}
{{- if or .Values.shim.enabled (and .Values.huntRunner.enabled $a.enabled (eq $a.source "shim")) -}}true{{- end -}}
{{- end -}}

{{- define "hunt-runner.autoscalingEnabled" -}}
{{- if and .Values.huntRunner.enabled .Values.huntRunner.autoscaling.enabled -}}true{{- end -}}
{{- end -}}

{{/* Secret names: an existing one wins; otherwise the chart's own, only if a password was given. */}}
{{- define "hunt-runner.clickhouseSecretName" -}}
{{- if .Values.clickhouse.existingSecret -}}
{{- .Values.clickhouse.existingSecret -}}
{{- else if .Values.clickhouse.password -}}
{{- printf "%s-clickhouse" (include "hunt-runner.fullname" . | trunc 52 | trimSuffix "-") -}}
{{- end -}}
{{- end -}}

{{- define "hunt-runner.shimSecretName" -}}
{{- if .Values.shim.clickhouse.existingSecret -}}
{{- .Values.shim.clickhouse.existingSecret -}}
{{- else if .Values.shim.clickhouse.password -}}
{{- printf "%s-shim-clickhouse" (include "hunt-runner.fullname" . | trunc 47 | trimSuffix "-") -}}
{{- end -}}
{{- end -}}

{{/*
ClickHouse connection env. Call with (dict "ctx" $ "user" U "secret" S "key" K).
The password only ever arrives through a secretKeyRef.
*/}}
{{- define "hunt-runner.clickhouseEnv" -}}
{{- $v := .ctx.Values -}}
- name: HUNT_RUNNER_CLICKHOUSE_URL
  value: {{ $v.clickhouse.url | quote }}
- name: HUNT_RUNNER_DATABASE
  value: {{ $v.clickhouse.database | quote }}
- name: HUNT_RUNNER_CONSISTENCY
  value: {{ $v.clickhouse.consistency | default "auto" | quote }}
- name: HUNT_RUNNER_CLICKHOUSE_USER
  value: {{ .user | quote }}
{{- if .secret }}
{{- /* A file, not an env var: env leaks into /proc/<pid>/environ, crash dumps and `kubectl describe`. */}}
- name: HUNT_RUNNER_CLICKHOUSE_PASSWORD_FILE
  value: /etc/hunt-runner/clickhouse-password/password
{{- end }}
{{- if or $v.clickhouse.ca.secretName $v.clickhouse.ca.configMapName }}
- name: HUNT_RUNNER_CLICKHOUSE_CA_FILE
  value: /etc/hunt-runner/clickhouse-ca/ca.crt
{{- end }}
- name: HUNT_RUNNER_LOG_LEVEL
  value: {{ $v.logLevel | quote }}
{{- end -}}

{{/* Where hunt definitions come from (runner and materialise). */}}
{{- define "hunt-runner.sourceEnv" -}}
{{- $h := .Values.hunts -}}
{{- if eq $h.source "git" }}
- name: HUNT_RUNNER_GIT_URL
  value: {{ $h.git.url | quote }}
- name: HUNT_RUNNER_GIT_REF
  value: {{ $h.git.ref | quote }}
- name: HUNT_RUNNER_GIT_PATH
  value: {{ $h.git.path | quote }}
- name: HUNT_RUNNER_GIT_CACHE_DIR
  value: /var/cache/hunt-runner/git
{{- if $h.git.tokenKey }}
- name: HUNT_RUNNER_GIT_TOKEN_FILE
  value: /etc/hunt-runner/git/token
{{- end }}
{{- if $h.git.sshKeyKey }}
- name: HUNT_RUNNER_GIT_SSH_KEY_FILE
  value: /etc/hunt-runner/git/ssh-key
{{- end }}
{{- if $h.git.knownHostsKey }}
- name: HUNT_RUNNER_GIT_KNOWN_HOSTS_FILE
  value: /etc/hunt-runner/git/known_hosts
{{- end }}
{{- else if eq $h.source "volume" }}
- name: HUNT_RUNNER_HUNTS_DIR
  value: {{ printf "/hunts/%s" $h.volume.subPath | trimSuffix "/" | quote }}
{{- else }}
- name: HUNT_RUNNER_HUNTS_DIR
  value: /etc/hunt-runner/hunts
{{- end }}
- name: HUNT_RUNNER_RELOAD_INTERVAL
  value: {{ $h.reloadInterval | quote }}
- name: HUNT_RUNNER_SPREAD_FRACTION
  value: {{ $h.spreadFraction | quote }}
{{- /* The runner checks, and materialise publishes and tombstones, this set only. */}}
- name: HUNT_RUNNER_HUNT_SET
  value: {{ .Values.huntSet | default "default" | quote }}
{{- end -}}

{{- define "hunt-runner.sourceVolumeMounts" -}}
{{- $h := .Values.hunts -}}
{{- if eq $h.source "git" }}
- name: git-cache
  mountPath: /var/cache/hunt-runner
{{- if $h.git.existingSecret }}
- name: git-credentials
  mountPath: /etc/hunt-runner/git
  readOnly: true
{{- end }}
{{- else if eq $h.source "volume" }}
- name: hunts
  mountPath: /hunts
  readOnly: true
{{- else }}
- name: hunts
  mountPath: /etc/hunt-runner/hunts
  readOnly: true
{{- end }}
{{- end -}}

{{- define "hunt-runner.sourceVolumes" -}}
{{- $h := .Values.hunts -}}
{{- if eq $h.source "git" }}
- name: git-cache
  emptyDir: {}
{{- if $h.git.existingSecret }}
- name: git-credentials
  secret:
    secretName: {{ $h.git.existingSecret | quote }}
    defaultMode: 0440
    items:
      {{- if $h.git.tokenKey }}
      - key: {{ $h.git.tokenKey | quote }}
        path: token
      {{- end }}
      {{- if $h.git.sshKeyKey }}
      - key: {{ $h.git.sshKeyKey | quote }}
        path: ssh-key
      {{- end }}
      {{- if $h.git.knownHostsKey }}
      - key: {{ $h.git.knownHostsKey | quote }}
        path: known_hosts
      {{- end }}
{{- end }}
{{- else if eq $h.source "volume" }}
- name: hunts
  {{- toYaml $h.volume.source | nindent 2 }}
{{- else }}
- name: hunts
  configMap:
    name: {{ include "hunt-runner.huntsConfigMapName" . | quote }}
{{- end }}
{{- end -}}

{{/* The writable /tmp (the root filesystem is read-only) and the optional ClickHouse CA. */}}
{{- define "hunt-runner.commonVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if or .Values.clickhouse.ca.secretName .Values.clickhouse.ca.configMapName }}
- name: clickhouse-ca
  mountPath: /etc/hunt-runner/clickhouse-ca
  readOnly: true
{{- end }}
{{- end -}}

{{- define "hunt-runner.commonVolumes" -}}
- name: tmp
  emptyDir: {}
{{- $ca := .Values.clickhouse.ca -}}
{{- if $ca.secretName }}
- name: clickhouse-ca
  secret:
    secretName: {{ $ca.secretName | quote }}
    items:
      - key: {{ $ca.key | quote }}
        path: ca.crt
{{- else if $ca.configMapName }}
- name: clickhouse-ca
  configMap:
    name: {{ $ca.configMapName | quote }}
    items:
      - key: {{ $ca.key | quote }}
        path: ca.crt
{{- end }}
{{- end -}}

{{/* Pod-level settings every pod of the release shares. */}}
{{- define "hunt-runner.podCommon" -}}
{{- include "hunt-runner.podCommonWith" (dict "ctx" . "preHook" false) -}}
{{- end -}}

{{/*
preHook: a pre-install hook runs before the release's own ServiceAccount exists, so it runs
under the namespace default account unless an existing account was named.
*/}}
{{- define "hunt-runner.podCommonWith" -}}
{{- $pre := .preHook -}}
{{- with .ctx -}}
{{- if not (and $pre .Values.serviceAccount.create) }}
serviceAccountName: {{ include "hunt-runner.serviceAccountName" . | quote }}
{{- end }}
automountServiceAccountToken: false
# The kubelet would otherwise inject <SERVICE>_PORT=tcp://… variables; a Service named
# hunt-runner yields HUNT_RUNNER_PORT…, inside this binary's own env prefix.
enableServiceLinks: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
{{- end -}}

{{/*
Hook annotations. Call with (dict "ctx" $ "phase" "post"|"pre" "weight" N).
Helm style: post-install,post-upgrade (or pre-…). Argo CD style: PostSync (or PreSync), because
Argo CD renders with `helm template` and owns the sync itself.
*/}}
{{- define "hunt-runner.hookAnnotations" -}}
{{- if eq .ctx.Values.hooks.style "argocd" }}
argocd.argoproj.io/hook: {{ ternary "PostSync" "PreSync" (eq .phase "post") }}
argocd.argoproj.io/hook-delete-policy: BeforeHookCreation,HookSucceeded
argocd.argoproj.io/sync-wave: {{ .weight | quote }}
{{- else }}
helm.sh/hook: {{ printf "%s-install,%s-upgrade" .phase .phase }}
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}
{{- end -}}

{{/* The runner's termination grace: explicit, or --grace + 15 s for in-flight INSERTs to end. */}}
{{- define "hunt-runner.terminationGrace" -}}
{{- $r := .Values.huntRunner -}}
{{- if gt (int $r.terminationGracePeriodSeconds) 0 -}}
{{- $r.terminationGracePeriodSeconds | int -}}
{{- else -}}
{{- add (int $r.graceSeconds) 15 -}}
{{- end -}}
{{- end -}}

{{/* The metrics-api trigger URL: the shim Service in the release namespace unless overridden. */}}
{{- define "hunt-runner.shimURL" -}}
{{- $addr := .Values.huntRunner.autoscaling.shimAddress -}}
{{- if not $addr -}}
{{- $addr = printf "%s.%s.svc.cluster.local:%d" (include "hunt-runner.shimName" .) .Release.Namespace (int .Values.shim.port) -}}
{{- end -}}
{{- printf "http://%s/keda/hunt-backlog" $addr -}}
{{- end -}}

{{/* NetworkPolicy egress every hunt-runner pod needs: DNS and ClickHouse. */}}
{{- define "hunt-runner.egressBase" -}}
- ports:
    - {port: 53, protocol: UDP}
    - {port: 53, protocol: TCP}
- ports:
    {{- range .Values.networkPolicy.clickhouse.ports }}
    - {port: {{ . }}, protocol: TCP}
    {{- end }}
  {{- with .Values.networkPolicy.clickhouse.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
{{- define "hunt-runner.egressGit" -}}
{{- if eq .Values.hunts.source "git" }}
- ports:
    {{- range .Values.networkPolicy.git.ports }}
    - {port: {{ . }}, protocol: TCP}
    {{- end }}
  {{- with .Values.networkPolicy.git.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/*
A Go duration of one unit ("750ms", "2s", "1m") in milliseconds, or "" when it has another shape
(then the render-time comparison that uses it is skipped).
*/}}
{{- define "hunt-runner.durationMs" -}}
{{- $d := toString . -}}
{{- if regexMatch "^[0-9]+ms$" $d -}}{{ trimSuffix "ms" $d }}
{{- else if regexMatch "^[0-9]+s$" $d -}}{{ mul (trimSuffix "s" $d | int) 1000 }}
{{- else if regexMatch "^[0-9]+m$" $d -}}{{ mul (trimSuffix "m" $d | int) 60000 }}
{{- end -}}
{{- end -}}

{{/*
The password Secret of a pod, mounted as a file (see clickhouseEnv). Call with
(dict "name" VOLUME "secret" S "key" K); renders nothing without a Secret.
*/}}
{{- define "hunt-runner.passwordVolume" -}}
{{- if .secret }}
- name: {{ .name }}
  secret:
    secretName: {{ .secret | quote }}
    # Owner root, group fsGroup (the runner's group): readable by the pod's user only through fsGroup.
    defaultMode: 0440
    items:
      - key: {{ .key | quote }}
        path: password
{{- end }}
{{- end -}}

{{- define "hunt-runner.passwordVolumeMount" -}}
{{- if .secret }}
- name: {{ .name }}
  mountPath: {{ .path }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* The hunts identity of the runner (provision --role hunts), when configured. */}}
{{- define "hunt-runner.huntsEnv" -}}
{{- $h := .Values.clickhouse.hunts -}}
{{- if $h.user }}
- name: HUNT_RUNNER_HUNTS_USER
  value: {{ $h.user | quote }}
{{- if $h.existingSecret }}
- name: HUNT_RUNNER_HUNTS_PASSWORD_FILE
  value: /etc/hunt-runner/hunts-password/password
{{- end }}
{{- end }}
{{- end -}}
