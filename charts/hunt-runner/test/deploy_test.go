package charttest

// Checks of the deployment files that need no Docker: the Dockerfile's shape, the compose
// project as Docker Compose itself loads it (compose-go, the library `docker compose` uses), the
// ClickHouse configuration it mounts, and the cluster scale-test script.

import (
	"context"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

const repoRoot = "../../.."

func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDockerfile(t *testing.T) {
	df := readRepoFile(t, "Dockerfile")
	var froms []string
	for _, l := range strings.Split(df, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && strings.EqualFold(f[0], "FROM") {
			froms = append(froms, l)
		}
	}
	if len(froms) < 2 {
		t.Fatalf("want a multi-stage build, got FROM lines %q", froms)
	}
	final := strings.Fields(froms[len(froms)-1])[1]
	if final != "scratch" && !strings.HasPrefix(final, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s: want scratch or distroless static", final)
	}
	finalStage := df[strings.LastIndex(df, froms[len(froms)-1]):]
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^USER 65532(:65532)?$`),
		regexp.MustCompile(`ca-certificates\.crt`),
		regexp.MustCompile(`(?m)^ENTRYPOINT \["/usr/local/bin/hunt-runner"\]$`),
	} {
		if !want.MatchString(finalStage) && !want.MatchString(df) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	if !regexp.MustCompile(`(?m)^USER 65532`).MatchString(finalStage) {
		t.Error("the final stage must run as 65532")
	}
	if !regexp.MustCompile(`CGO_ENABLED=0[^\n]*(\\\n[^\n]*)*go build [^\n]*\./cmd/hunt-runner`).MatchString(df) {
		t.Error("the binary must be built with CGO_ENABLED=0 from ./cmd/hunt-runner")
	}
	for _, l := range strings.Split(df, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && slices.Contains([]string{"COPY", "ADD", "RUN"}, strings.ToUpper(f[0])) && strings.Contains(strings.ToLower(l), "chdb") {
			t.Errorf("the image must not contain chDB: %s", l)
		}
	}
	ignore := readRepoFile(t, ".dockerignore")
	for _, want := range []string{".git", "*.so", "bin/"} {
		if !slices.Contains(strings.Fields(ignore), want) {
			t.Errorf(".dockerignore must exclude %s", want)
		}
	}
}

func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	for _, v := range []string{"HUNT_ADMIN_PASSWORD", "HUNT_RUNNER_PASSWORD", "HUNT_SCALER_PASSWORD"} {
		t.Setenv(v, "test-"+strings.ToLower(v))
	}
	dir := filepath.Join(repoRoot, "deploy", "compose")
	opts, err := cli.NewProjectOptions([]string{filepath.Join(dir, "compose.yaml")},
		cli.WithOsEnv, cli.WithWorkingDirectory(dir))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker compose would reject the file: %v", err)
	}
	return p
}

func TestComposeProject(t *testing.T) {
	p := loadCompose(t)
	for _, want := range []string{"keeper", "ch1", "ch2", "schema-ch1", "schema-ch2", "provision-scaler",
		"provision-runner", "materialise", "runner-1", "runner-2", "shim"} {
		if _, ok := p.Services[want]; !ok {
			t.Errorf("service %s missing", want)
		}
	}
	env := func(s types.ServiceConfig, k string) string {
		if v := s.Environment[k]; v != nil {
			return *v
		}
		return ""
	}
	hunt := 0
	for name, s := range p.Services {
		if s.Build == nil { // ClickHouse and Keeper; every hunt-runner service builds the image
			continue
		}
		hunt++
		if s.Image != "hunt-runner:dev" {
			t.Errorf("%s: image %q", name, s.Image)
		}
		if !s.ReadOnly || s.User != "65532:65532" || !slices.Contains(s.Tmpfs, "/tmp") {
			t.Errorf("%s: hunt-runner containers run read-only as 65532 with a tmpfs /tmp", name)
		}
		if len(s.Entrypoint) != 0 || len(s.Command) == 0 {
			t.Errorf("%s: the command is the subcommand of the image's entrypoint, got %v", name, s.Command)
		}
		var envs []string
		for k, v := range s.Environment {
			if v != nil && strings.HasPrefix(k, "HUNT_RUNNER_") && !strings.Contains(k, "PASSWORD") {
				envs = append(envs, k+"="+*v)
			}
		}
		checkCLIArgs(t, "compose service "+name, s.Command, envs)
	}
	if hunt != 8 {
		t.Errorf("%d hunt-runner services, want 8", hunt)
	}
	dependsOn := func(svc, on, condition string) {
		t.Helper()
		d, ok := p.Services[svc].DependsOn[on]
		if !ok || d.Condition != condition {
			t.Errorf("%s must depend on %s (%s), got %+v", svc, on, condition, p.Services[svc].DependsOn)
		}
	}
	dependsOn("schema-ch2", "schema-ch1", types.ServiceConditionCompletedSuccessfully)
	dependsOn("materialise", "provision-runner", types.ServiceConditionCompletedSuccessfully)
	dependsOn("runner-1", "materialise", types.ServiceConditionCompletedSuccessfully)
	dependsOn("runner-2", "materialise", types.ServiceConditionCompletedSuccessfully)
	dependsOn("shim", "provision-scaler", types.ServiceConditionCompletedSuccessfully)

	if got := env(p.Services["runner-1"], "HUNT_RUNNER_CLICKHOUSE_URL"); !strings.Contains(got, "ch1") {
		t.Errorf("runner-1 should use replica ch1, got %s", got)
	}
	// runner-2 reaches the replicas as a pod behind a Service does: through the balancer, which
	// is only correct with quorum.
	if got := env(p.Services["runner-2"], "HUNT_RUNNER_CLICKHOUSE_URL"); !strings.Contains(got, "lb:") {
		t.Errorf("runner-2 should go through the load balancer lb, got %s", got)
	}
	if got := env(p.Services["runner-2"], "HUNT_RUNNER_CONSISTENCY"); got != "quorum" {
		t.Errorf("runner-2 is behind a balancer: it needs consistency quorum, got %q", got)
	}
	if _, ok := p.Services["lb"]; !ok {
		t.Error("service lb (the load balancer make test-cluster tests through) missing")
	}
	haproxy := readRepoFile(t, "deploy/compose/lb/haproxy.cfg")
	for _, backend := range []string{"server ch1 ch1:9000", "server ch2 ch2:9000", "server ch1 ch1:8123", "server ch2 ch2:8123"} {
		if !strings.Contains(haproxy, backend) {
			t.Errorf("deploy/compose/lb/haproxy.cfg does not balance over %q", backend)
		}
	}
	if u := env(p.Services["shim"], "HUNT_RUNNER_CLICKHOUSE_USER"); u != "hunt_scaler" {
		t.Errorf("the shim must connect as the scaler identity, got %q", u)
	}
	for _, r := range []string{"runner-1", "runner-2", "materialise"} {
		if u := env(p.Services[r], "HUNT_RUNNER_CLICKHOUSE_USER"); u != "hunt_runner" {
			t.Errorf("%s must connect as the runner identity, got %q", r, u)
		}
	}
	if !slices.Contains(p.Services["materialise"].Command, "--changed-exit-code=0") {
		t.Errorf("materialise must treat 'changed' as success: %v", p.Services["materialise"].Command)
	}
	for _, s := range []string{"schema-ch1", "schema-ch2"} {
		if !slices.Contains(p.Services[s].Command, "--topology=replicated") {
			t.Errorf("%s: %v", s, p.Services[s].Command)
		}
	}

	// No secret is written in the files: every password is a required ${VAR:?…}.
	raw := readRepoFile(t, "deploy/compose/compose.yaml")
	for _, m := range regexp.MustCompile(`(?m)^\s*([A-Z_]*PASSWORD[A-Z_]*):\s*(.*)$`).FindAllStringSubmatch(raw, -1) {
		if !strings.HasPrefix(m[2], "${") || !strings.Contains(m[2], ":?") {
			t.Errorf("%s is set to %q: passwords must be required variables, never literals", m[1], m[2])
		}
	}
}

// The ClickHouse configuration is well-formed and consistent with the compose services.
func TestComposeClickHouseConfig(t *testing.T) {
	type replica struct {
		Host string `xml:"host"`
		Port int    `xml:"port"`
	}
	var cluster struct {
		ZooKeeper struct {
			Nodes []struct {
				Host string `xml:"host"`
				Port int    `xml:"port"`
			} `xml:"node"`
		} `xml:"zookeeper"`
		RemoteServers struct {
			Hunt struct {
				Shards []struct {
					Replicas []replica `xml:"replica"`
				} `xml:"shard"`
			} `xml:"hunt"`
		} `xml:"remote_servers"`
		UserDirectories struct {
			Replicated struct {
				Path string `xml:"zookeeper_path"`
			} `xml:"replicated"`
		} `xml:"user_directories"`
	}
	if err := xml.Unmarshal([]byte(readRepoFile(t, "deploy/compose/clickhouse/cluster.xml")), &cluster); err != nil {
		t.Fatalf("cluster.xml: %v", err)
	}
	var keeper struct {
		Server struct {
			Port int `xml:"tcp_port"`
			Raft struct {
				Servers []struct {
					Hostname string `xml:"hostname"`
				} `xml:"server"`
			} `xml:"raft_configuration"`
		} `xml:"keeper_server"`
	}
	if err := xml.Unmarshal([]byte(readRepoFile(t, "deploy/compose/keeper/keeper_config.xml")), &keeper); err != nil {
		t.Fatalf("keeper_config.xml: %v", err)
	}
	p := loadCompose(t)
	if len(cluster.ZooKeeper.Nodes) != 1 || cluster.ZooKeeper.Nodes[0].Host != p.Services["keeper"].Hostname ||
		cluster.ZooKeeper.Nodes[0].Port != keeper.Server.Port || keeper.Server.Raft.Servers[0].Hostname != "keeper" {
		t.Errorf("ClickHouse must reach Keeper at keeper:%d: %+v", keeper.Server.Port, cluster.ZooKeeper)
	}
	if cluster.UserDirectories.Replicated.Path == "" {
		t.Error("users and grants must live in Keeper, so provisioning once covers both replicas")
	}
	shards := cluster.RemoteServers.Hunt.Shards
	if len(shards) != 1 || len(shards[0].Replicas) != 2 {
		t.Fatalf("want one shard of two replicas, got %+v", shards)
	}
	for i, name := range []string{"ch1", "ch2"} {
		if shards[0].Replicas[i].Host != name || p.Services[name].Hostname != name {
			t.Errorf("replica %d: host %q, service hostname %q", i, shards[0].Replicas[i].Host, p.Services[name].Hostname)
		}
		var macros struct {
			Interserver string `xml:"interserver_http_host"`
			Shard       string `xml:"macros>shard"`
			Replica     string `xml:"macros>replica"`
		}
		if err := xml.Unmarshal([]byte(readRepoFile(t, "deploy/compose/clickhouse/"+name+".xml")), &macros); err != nil {
			t.Fatalf("%s.xml: %v", name, err)
		}
		if macros.Replica != name || macros.Shard == "" || macros.Interserver != name {
			t.Errorf("%s.xml macros %+v", name, macros)
		}
		mounted := false
		for _, v := range p.Services[name].Volumes {
			if strings.HasSuffix(v.Source, name+".xml") && strings.HasPrefix(v.Target, "/etc/clickhouse-server/config.d/") {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s does not mount its own macros", name)
		}
	}
	if !strings.Contains(readRepoFile(t, "deploy/compose/clickhouse/sample-schema.sql"), "ENGINE = Replicated(") {
		t.Error("the sample database must be Replicated so both replicas see the hunts' tables")
	}
}

// The cluster proof cannot run here, but its shell must parse and be shellcheck-clean.
func TestKEDAScaleTestScript(t *testing.T) {
	script := filepath.Join(repoRoot, "deploy", "keda-scale-test.sh")
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Skip("shellcheck not installed (apt-get install shellcheck)")
	}
	if out, err := exec.Command(sc, "-x", script).CombinedOutput(); err != nil {
		t.Fatalf("shellcheck: %v\n%s", err, out)
	}
}
