package charttest

// The single-VM example (deploy/single-vm): loaded by Docker Compose's own library, every
// hunt-runner service's command and environment parsed by the real CLI, and no secret in it.

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

func loadSingleVM(t *testing.T, env map[string]string) (*types.Project, error) {
	t.Helper()
	for _, k := range []string{"HUNT_RUNNER_CLICKHOUSE_URL", "CLICKHOUSE_PASSWORD_FILE", "HUNTS_DIR", "SHIM_PASSWORD_FILE",
		"HUNT_RUNNER_CLICKHOUSE_USER", "SHIM_CLICKHOUSE_USER", "HUNT_RUNNER_DATABASE", "HUNT_RUNNER_IMAGE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	dir := filepath.Join(repoRoot, "deploy", "single-vm")
	opts, err := cli.NewProjectOptions([]string{filepath.Join(dir, "compose.yaml")},
		cli.WithOsEnv, cli.WithWorkingDirectory(dir))
	if err != nil {
		t.Fatal(err)
	}
	return opts.LoadProject(context.Background())
}

func TestSingleVMCompose(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte("generated-at-test-time\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inputs := map[string]string{
		"HUNT_RUNNER_CLICKHOUSE_URL": "clickhouse://ch.example.internal:9000",
		"CLICKHOUSE_PASSWORD_FILE":   pw,
		"HUNTS_DIR":                  t.TempDir(),
	}
	// Every required input is required: leaving one out must stop docker compose with its name.
	for missing := range inputs {
		partial := map[string]string{}
		for k, v := range inputs {
			if k != missing {
				partial[k] = v
			}
		}
		if _, err := loadSingleVM(t, partial); err == nil || !strings.Contains(err.Error(), missing) {
			t.Errorf("without %s: %v", missing, err)
		}
	}

	p, err := loadSingleVM(t, inputs)
	if err != nil {
		t.Fatalf("docker compose would reject the file: %v", err)
	}
	want := []string{"materialise", "runner", "schema", "shim"}
	if got := slices.Sorted(func(yield func(string) bool) {
		for name := range p.Services {
			if !yield(name) {
				return
			}
		}
	}); !slices.Equal(got, want) {
		t.Fatalf("services %v, want %v", got, want)
	}
	runs := 0
	for name, s := range p.Services {
		if !s.ReadOnly || s.User != "65532:65532" || !slices.Contains(s.Tmpfs, "/tmp") {
			t.Errorf("%s: hunt-runner containers run read-only as 65532 with a tmpfs /tmp", name)
		}
		if len(s.Entrypoint) != 0 || len(s.Command) == 0 {
			t.Errorf("%s: the command is the subcommand of the image's entrypoint, got %v", name, s.Command)
		}
		if s.Command[0] == "run" {
			runs++
		}
		var envs []string
		for k, v := range s.Environment {
			if v == nil {
				continue
			}
			if k == "HUNT_RUNNER_CLICKHOUSE_PASSWORD" {
				t.Errorf("%s: the password is given in the environment, not as a file", name)
			}
			if strings.HasPrefix(k, "HUNT_RUNNER_") {
				envs = append(envs, k+"="+*v)
			}
		}
		if f := s.Environment["HUNT_RUNNER_CLICKHOUSE_PASSWORD_FILE"]; f == nil || !strings.HasPrefix(*f, "/run/secrets/") || len(s.Secrets) != 1 ||
			*f != "/run/secrets/"+s.Secrets[0].Source {
			t.Errorf("%s: the password must come from its mounted Compose secret, got %v and %v", name, f, s.Secrets)
		}
		if u := s.Environment["HUNT_RUNNER_CLICKHOUSE_URL"]; u == nil || *u != inputs["HUNT_RUNNER_CLICKHOUSE_URL"] {
			t.Errorf("%s: ClickHouse URL %v, want the input", name, u)
		}
		checkCLIArgs(t, "single-vm service "+name, s.Command, envs)
	}
	if runs != 1 {
		t.Errorf("%d runners, want one", runs)
	}
	dependsOn := func(svc, on string) {
		t.Helper()
		if d, ok := p.Services[svc].DependsOn[on]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s must wait for %s to complete, got %+v", svc, on, p.Services[svc].DependsOn)
		}
	}
	dependsOn("materialise", "schema")
	dependsOn("runner", "materialise")
	dependsOn("shim", "schema")
	for _, svc := range []string{"runner", "materialise"} {
		if !slices.ContainsFunc(p.Services[svc].Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Source == inputs["HUNTS_DIR"] && v.Target == "/hunts" && v.ReadOnly
		}) {
			t.Errorf("%s does not mount HUNTS_DIR read-only at /hunts: %+v", svc, p.Services[svc].Volumes)
		}
	}

	raw := readRepoFile(t, "deploy/single-vm/compose.yaml")
	if m := regexp.MustCompile(`(?im)^\s*[A-Z_]*(PASSWORD|TOKEN)[A-Z_]*:\s*[^$\s/].*$`).FindString(raw); m != "" {
		t.Errorf("a literal secret in the compose file: %s", m)
	}
	if !strings.Contains(readRepoFile(t, "deploy/single-vm/README.md"), "docker compose -f deploy/single-vm/compose.yaml up") {
		t.Error("the README does not say how to start it")
	}
}
