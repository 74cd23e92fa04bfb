package provision

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"scaler", Options{Role: RoleScaler}},
		{"runner", Options{Role: RoleRunner, SourceDatabases: []string{"logs", "edr", "logs"}}},
		{"scaler_cluster", Options{Role: RoleScaler, Database: "hunts", User: "keda_reader", Cluster: "main"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Generate(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			got := p.Text() + "-- sha256: " + p.SHA256() + "\n"
			path := filepath.Join("testdata", tc.name+".golden.sql")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./provision -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the generated SQL; if intended, run go test ./provision -update\n%s", path, got)
			}
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

func TestScalerGrantsOnlyTheView(t *testing.T) {
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
	want := "GRANT SELECT ON `d`.`hunt_backlog_v1` TO `hunt_scaler` WITH REPLACE OPTION"
	if len(grants) != 1 || grants[0] != want {
		t.Fatalf("grants %q, want exactly %q", grants, want)
	}
	// The view is the schema's (BacklogViewSQL): the scaler role creates only its identity.
	for _, s := range p.Statements {
		if strings.Contains(s.SQL, "VIEW") {
			t.Errorf("scaler plan creates a view:\n%s", s.SQL)
		}
	}
	view := BacklogViewSQL("d", "")
	if !strings.HasPrefix(view, "CREATE OR REPLACE VIEW `d`.`hunt_backlog_v1`\n") || !strings.Contains(view, "SQL SECURITY DEFINER") ||
		!strings.Contains(view, BacklogViewSelect("d")) {
		t.Fatalf("view statement:\n%s", view)
	}
	if on := BacklogViewSQL("d", "main"); !strings.HasPrefix(on, "CREATE OR REPLACE VIEW `d`.`hunt_backlog_v1` ON CLUSTER `main`\n") {
		t.Fatalf("view statement on a cluster:\n%s", on)
	}
}

func TestRunnerGrants(t *testing.T) {
	p, err := Generate(Options{Role: RoleRunner, SourceDatabases: []string{"logs"}})
	if err != nil {
		t.Fatal(err)
	}
	text := p.Text()
	for _, want := range []string{"SELECT, INSERT ON `hunt_runner`.`hunt_lease`", "SELECT, INSERT, ALTER DELETE ON `hunt_runner`.`hunt_findings`",
		"SELECT ON `logs`.*", "SELECT ON system.`replicas`", "WITH REPLACE OPTION"} {
		if !strings.Contains(text, want) {
			t.Errorf("runner SQL lacks %q", want)
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
		{Role: RoleRunner, SourceDatabases: []string{"system"}},
		{Role: RoleRunner, SourceDatabases: []string{"bad name"}},
		{Role: RoleRunner, Cluster: "c;DROP"},
	} {
		if _, err := Generate(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("Generate(%+v) = %v, want ErrInvalid", o, err)
		}
	}
}

func TestSourceDatabases(t *testing.T) {
	dbs, notes := SourceDatabases(map[string]string{
		"a": "SELECT * FROM logs.auth AS a JOIN `edr`.`process` p ON a.host = p.host WHERE a.t >= {window_start:DateTime64(3)}",
		"b": "WITH recent AS (SELECT * FROM net.flows) SELECT count() FROM recent, dns.queries q -- FROM commented.out\n" +
			"WHERE q.name = 'FROM quoted.string' AND q.x IN (SELECT y FROM \"quoted db\".t)",
		"c": "SELECT * FROM remote('h', db.t) UNION ALL SELECT * FROM bare_table FINAL",
		"d": "SELECT * FROM (SELECT 1 FROM numbers(3)) /* FROM block.comment */ LEFT ANY JOIN geo.ip USING (x)",
		"e": "SELECT extract(day FROM e.ts), trim(BOTH ' ' FROM s.name), substring(x FROM 2) FROM sample.events AS e " +
			"WHERE exists(SELECT 1 FROM intel.iocs i WHERE i.v = e.ip) AND e.id IN (SELECT id FROM final.ids)",
	})
	if got, want := strings.Join(dbs, ","), "dns,edr,final,geo,intel,logs,net,quoted db,sample"; got != want {
		t.Errorf("databases %q, want %q", got, want)
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{`hunt c: table "bare_table" is not database-qualified`, "hunt c: table function remote()", "hunt d: table function numbers()"} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes lack %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "recent") {
		t.Errorf("a CTE was taken for a table:\n%s", joined)
	}
}
