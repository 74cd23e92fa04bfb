package provision

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/golden"
	"github.com/hunt-runner/hunt-runner/store"
)

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"scaler", Options{Role: RoleScaler}},
		{"runner", Options{Role: RoleRunner}},
		{"materialiser", Options{Role: RoleMaterialiser}},
		{"hunts", Options{Role: RoleHunts, SourceDatabases: []string{"logs", "edr", "logs"}}},
		{"hunts_rotate", Options{Role: RoleHunts, SourceDatabases: []string{"sample"}, RotatePassword: true, MaxExecutionTime: 600, MaxMemoryUsage: 1 << 30}},
		{"scaler_cluster", Options{Role: RoleScaler, Database: "hunts", User: "keda_reader", Cluster: "main"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Generate(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			got := p.Text() + "-- sha256: " + p.SHA256() + "\n"
			golden.Check(t, filepath.Join("testdata", tc.name+".golden.sql"), got)
			if strings.Contains(got, "sha256_password BY '"+PasswordPlaceholder+"'") == false {
				t.Errorf("user statement does not carry the placeholder")
			}
			again, _ := Generate(tc.opts)
			if again.SHA256() != p.SHA256() {
				t.Errorf("generation is not deterministic")
			}
		})
	}
}

func TestScalerGrantsOnlyTheViewAndTheLayout(t *testing.T) {
	p, err := Generate(Options{Role: RoleScaler, Database: "d"})
	if err != nil {
		t.Fatal(err)
	}
	var grants []string
	for _, s := range p.Statements {
		if s.Kind == KindGrant {
			grants = append(grants, s.SQL)
		}
	}
	want := "GRANT SELECT ON `d`.`hunt_backlog_v1`, SELECT ON `d`.`hunt_schema` TO `hunt_scaler` WITH REPLACE OPTION"
	if len(grants) != 1 || grants[0] != want {
		t.Fatalf("grants %q, want exactly %q", grants, want)
	}
	// The view is the schema's (store.BacklogViewSQL): the scaler role creates only its identity.
	for _, s := range p.Statements {
		if strings.Contains(s.SQL, "VIEW") {
			t.Errorf("scaler plan creates a view:\n%s", s.SQL)
		}
	}
	view := store.BacklogViewSQL("d", "")
	if !strings.HasPrefix(view, "CREATE OR REPLACE VIEW `d`.`hunt_backlog_v1`\n") || !strings.Contains(view, "SQL SECURITY DEFINER") ||
		!strings.Contains(view, store.BacklogViewSelect("d")) {
		t.Fatalf("view statement:\n%s", view)
	}
	if on := store.BacklogViewSQL("d", "main"); !strings.HasPrefix(on, "CREATE OR REPLACE VIEW `d`.`hunt_backlog_v1` ON CLUSTER `main`\n") {
		t.Fatalf("view statement on a cluster:\n%s", on)
	}
}

func TestRunnerGrants(t *testing.T) {
	p, err := Generate(Options{Role: RoleRunner})
	if err != nil {
		t.Fatal(err)
	}
	text := p.Text()
	for _, want := range []string{"SELECT, INSERT ON `hunt_runner`.`hunt_lease`", "SELECT, INSERT ON `hunt_runner`.`hunt_findings`",
		"SELECT ON `hunt_runner`.`hunt_schedule`", "SELECT ON `hunt_runner`.`hunt_publish`", "SELECT ON `hunt_runner`.`hunt_request`",
		"SELECT ON system.`replicas`", "WITH REPLACE OPTION"} {
		if !strings.Contains(text, want) {
			t.Errorf("runner SQL lacks %q", want)
		}
	}
	for _, banned := range []string{"INSERT ON `hunt_runner`.`hunt_schedule`", "INSERT ON `hunt_runner`.`hunt_publish`", "INSERT ON `hunt_runner`.`hunt_request`", ".*"} {
		if strings.Contains(text, banned) {
			t.Errorf("runner SQL holds %q: materialise and trigger write those, and hunts read sources", banned)
		}
	}
	for _, banned := range []string{"URL", "S3", "REMOTE", "FILE", "ALL", "*.*", "CREATE TEMPORARY"} {
		if strings.Contains(strings.ToUpper(grantOf(p)), " "+banned+" ") {
			t.Errorf("runner grant contains %q", banned)
		}
	}
}

func grantOf(p *Plan) string {
	for _, s := range p.Statements {
		if s.Kind == KindGrant {
			return s.SQL
		}
	}
	return ""
}

func TestGenerateRejects(t *testing.T) {
	for _, o := range []Options{
		{Role: "admin"},
		{Role: RoleScaler, User: "a b"},
		{Role: RoleScaler, Database: "x`y"},
		{Role: RoleScaler, SourceDatabases: []string{"logs"}},
		{Role: RoleRunner, SourceDatabases: []string{"logs"}},
		{Role: RoleHunts},
		{Role: RoleHunts, SourceDatabases: []string{"system"}},
		{Role: RoleHunts, SourceDatabases: []string{"INFORMATION_SCHEMA"}},
		{Role: RoleHunts, SourceDatabases: []string{"hunt_runner"}},
		{Role: RoleHunts, SourceDatabases: []string{"bad name"}},
		{Role: RoleHunts, SourceDatabases: []string{"logs"}, MaxMemoryUsage: -1},
		{Role: RoleRunner, MaxMemoryUsage: 1 << 30},
		{Role: RoleHunts, SourceDatabases: []string{"logs"}, User: "default"},
		{Role: RoleRunner, Cluster: "c;DROP"},
	} {
		if _, err := Generate(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("Generate(%+v) = %v, want ErrInvalid", o, err)
		}
	}
}

// TestHuntsGrants: the hunts identity reads the named sources, under a CONST readonly and MAX
// limits, and holds nothing else: no coordination table, no source privilege (URL, REMOTE,
// FILE, S3), no system database.
func TestHuntsGrants(t *testing.T) {
	p, err := Generate(Options{Role: RoleHunts, SourceDatabases: []string{"logs", "edr"}})
	if err != nil {
		t.Fatal(err)
	}
	grant := grantOf(p)
	if want := "GRANT\n  SELECT ON `edr`.*,\n  SELECT ON `logs`.*\nTO `hunt_hunts` WITH REPLACE OPTION"; grant != want {
		t.Errorf("grant:\n%s\nwant:\n%s", grant, want)
	}
	text := p.Text()
	for _, want := range []string{"readonly = 2 CONST", "max_execution_time = 3600 MAX 3600", "max_memory_usage = 8589934592 MAX 8589934592",
		"max_result_bytes = 1073741824 MAX 1073741824", "result_overflow_mode = 'throw' CONST",
		"SETTINGS PROFILE `hunt_hunts_profile`", "DEFAULT DATABASE `edr`"} {
		if !strings.Contains(text, want) {
			t.Errorf("hunts SQL lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "hunt_runner`.") || strings.Contains(text, "system.") {
		t.Errorf("hunts SQL reaches hunt-runner's or the system database:\n%s", text)
	}
	for _, banned := range []string{"URL", "S3", "REMOTE", "FILE", "INSERT", "ALL"} {
		if strings.Contains(strings.ToUpper(grant), banned) {
			t.Errorf("hunts grant contains %q", banned)
		}
	}
}

// TestRotatePassword: only with RotatePassword does the text set an existing user's password,
// and the hash changes with it, so a reviewed plain text cannot be applied as a rotation.
func TestRotatePassword(t *testing.T) {
	for _, role := range Roles {
		o := Options{Role: role}
		if role == RoleHunts {
			o.SourceDatabases = []string{"logs"}
		}
		plain, err := Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		o.RotatePassword = true
		rot, err := Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		alter := "ALTER USER `hunt_" + string(role) + "` IDENTIFIED WITH sha256_password BY '" + PasswordPlaceholder + "'"
		if strings.Contains(plain.Text(), "IDENTIFIED WITH sha256_password BY '"+PasswordPlaceholder+"';") && strings.Contains(plain.Text(), "ALTER USER `hunt_"+string(role)+"` IDENTIFIED") {
			t.Errorf("%s: the plain text rotates the password", role)
		}
		if !strings.Contains(rot.Text(), alter) {
			t.Errorf("%s: the rotation lacks %q:\n%s", role, alter, rot.Text())
		}
		if plain.SHA256() == rot.SHA256() {
			t.Errorf("%s: rotation has the same hash as the plain text", role)
		}
	}
}

// TestMaterialiserGrants: the materialiser writes the schedule, publish and request tables only,
// and reads the layout version (materialise's layout check).
func TestMaterialiserGrants(t *testing.T) {
	p, err := Generate(Options{Role: RoleMaterialiser})
	if err != nil {
		t.Fatal(err)
	}
	want := "GRANT\n  SELECT, INSERT ON `hunt_runner`.`hunt_schedule`,\n  SELECT, INSERT ON `hunt_runner`.`hunt_publish`,\n" +
		"  SELECT, INSERT ON `hunt_runner`.`hunt_request`,\n  SELECT ON `hunt_runner`.`hunt_schema`,\n  SELECT ON system.`databases`\nTO `hunt_materialiser` WITH REPLACE OPTION"
	if got := grantOf(p); got != want {
		t.Errorf("grant:\n%s\nwant:\n%s", got, want)
	}
}
