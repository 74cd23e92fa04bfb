package charttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

var (
	cliOnce sync.Once
	cliBin  string
	cliErr  error
	cliOut  []byte
)

// huntRunnerBinary builds the real CLI from the main module once per test binary.
func huntRunnerBinary(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hunt-runner-chart-cli-")
		if err != nil {
			cliErr = err
			return
		}
		cliBin = filepath.Join(dir, "hunt-runner")
		cmd := exec.Command("go", "build", "-tags", "nochdb", "-o", cliBin, "./cmd/hunt-runner")
		cmd.Dir = filepath.Join(chartDir, "..", "..")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cliOut, cliErr = cmd.CombinedOutput()
	})
	if cliErr != nil {
		t.Fatalf("build hunt-runner: %v\n%s", cliErr, cliOut)
	}
	return cliBin
}

// checkCLIContract runs the real binary with every rendered container's arguments and literal
// HUNT_RUNNER_* environment, followed by --help: the CLI parses all of it (and fails on an
// unknown flag or a value it cannot parse) before it would connect anywhere. A chart that
// renders a flag the binary does not know would crash-loop every pod; this catches it here.
func checkCLIContract(t *testing.T, r *rendered) {
	t.Helper()
	var pods []struct {
		id   string
		spec corev1.PodSpec
	}
	add := func(id string, s corev1.PodSpec) {
		pods = append(pods, struct {
			id   string
			spec corev1.PodSpec
		}{id, s})
	}
	for _, d := range all[appsv1.Deployment](r) {
		add("Deployment/"+d.Name, d.Spec.Template.Spec)
	}
	for _, j := range all[batchv1.Job](r) {
		add("Job/"+j.Name, j.Spec.Template.Spec)
	}
	for _, j := range all[batchv1.CronJob](r) {
		add("CronJob/"+j.Name, j.Spec.JobTemplate.Spec.Template.Spec)
	}
	for _, p := range all[corev1.Pod](r) {
		add("Pod/"+p.Name, p.Spec)
	}
	checked := 0
	for _, p := range pods {
		for _, c := range p.spec.Containers {
			if !strings.Contains(c.Image, "hunt-runner") || len(c.Args) == 0 {
				continue
			}
			var env []string
			for _, e := range c.Env {
				if e.ValueFrom == nil && strings.HasPrefix(e.Name, "HUNT_RUNNER_") {
					env = append(env, e.Name+"="+e.Value)
				}
			}
			checkCLIArgs(t, p.id+" container "+c.Name, c.Args, env)
			checked++
		}
	}
	if checked == 0 {
		t.Errorf("no hunt-runner container rendered: %s", r.summary())
	}
}

// checkCLIArgs runs the real binary with args and env (KEY=VALUE) followed by --help.
func checkCLIArgs(t *testing.T, where string, args, env []string) {
	t.Helper()
	cmd := exec.Command(huntRunnerBinary(t), append(append([]string{}, args...), "--help")...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: hunt-runner %s rejects the arguments/env: %v\n%s", where, strings.Join(args, " "), err, out)
	}
}
