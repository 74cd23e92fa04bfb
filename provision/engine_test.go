package provision

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// chDB (clickhouse-local) has no writable access storage: its default user may not create
// users or settings profiles, and a GRANT finds no such user. These are the statement kinds it
// cannot run; the SQL SECURITY DEFINER view (store.BacklogViewSQL) runs on it.
var chdbUnsupported = map[string]int32{KindProfile: 497, KindUser: 497, KindGrant: 511} // ACCESS_DENIED, UNKNOWN_ROLE

func onRealServer() bool { return os.Getenv(chtest.EnvURL) != "" }

func TestApplyTwiceOnEngine(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Three live hunts, one of them finished for now and one tombstoned: two are due.
	if err := db.Conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated) VALUES "+
		"('a', 60, 0, 1, 'h', now64(6)), ('b', 3600, 7, 1, 'h', now64(6)), ('c', 60, 0, 1, 'h', now64(6)), ('gone', 0, 0, 0, 'h', now64(6))"); err != nil {
		t.Fatal(err)
	}
	if err := db.Conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_watermark (hunt_id, watermark, claim_id, updated) VALUES ('c', now() + 3600, generateUUIDv4(), now64(6))"); err != nil {
		t.Fatal(err)
	}

	user := "hunt_scaler_" + db.Name
	dropUserAtCleanup(t, db, user)
	p, err := Generate(Options{Role: RoleScaler, Database: db.Name, User: user})
	if err != nil {
		t.Fatal(err)
	}
	password, secret := testPassword()
	var viewDefs []string
	for round := 1; round <= 2; round++ {
		// As `hunt-runner schema` does on every run: the view is the schema's, not the role's.
		if err := db.Conn.Exec(ctx, store.BacklogViewSQL(db.Name, "")); err != nil {
			t.Fatal(err)
		}
		applyEach(t, ctx, db.Conn, p, password, secret, round)
		var def string
		if err := db.Conn.QueryRow(ctx, "SELECT create_table_query FROM system.tables WHERE database = ? AND name = ?", db.Name, store.ViewBacklog).Scan(&def); err != nil {
			t.Fatal(err)
		}
		viewDefs = append(viewDefs, def)
	}
	if viewDefs[0] != viewDefs[1] {
		t.Errorf("re-creating the view changed it:\n%s\n---\n%s", viewDefs[0], viewDefs[1])
	}
	if !strings.Contains(viewDefs[0], "SQL SECURITY DEFINER") {
		t.Errorf("view is not SQL SECURITY DEFINER:\n%s", viewDefs[0])
	}
	want, err := store.New(db.Conn, db.Name).CountDue(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var got uint64
	if err := db.Conn.QueryRow(ctx, "SELECT value FROM "+db.Name+"."+store.ViewBacklog).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != want || got != 2 {
		t.Fatalf("view says %d, store.CountDue says %d, want 2", got, want)
	}
	// The scaler reads under its profile's readonly = 1, which refuses a SETTINGS clause in its
	// own query; the one inside the view's body (from the due SQL) must not be refused.
	roctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"readonly": 1}))
	if err := db.Conn.QueryRow(roctx, "SELECT value FROM "+db.Name+"."+store.ViewBacklog).Scan(&got); err != nil || got != 2 {
		t.Fatalf("view read with readonly = 1: %d, %v; want 2", got, err)
	}

	if onRealServer() {
		checkScalerIdentity(t, ctx, db, user, password)
	}
}

// testPassword is made at test time (no secret sits in a fixture): secret is its random part,
// and the quote and backslash before it exercise the escaping of the string literal.
func testPassword() (password, secret string) {
	secret = rand.Text()
	return "pa'ss\\" + secret, secret
}

// applyEach applies p one statement at a time. On a real server every statement must succeed;
// on chDB exactly the access-control statements fail, with chDB's codes, and no error may carry
// the password.
func applyEach(t *testing.T, ctx context.Context, conn Execer, p *Plan, password, secret string, round int) {
	t.Helper()
	for i, s := range p.Statements {
		single := &Plan{Options: p.Options, Statements: []Statement{s}}
		_, err := single.Apply(ctx, conn, password)
		code, unsupported := chdbUnsupported[s.Kind]
		switch {
		case err == nil && (onRealServer() || !unsupported):
		case err != nil && !onRealServer() && unsupported:
			if !strings.Contains(err.Error(), "code: "+strconv.Itoa(int(code))) {
				t.Errorf("round %d statement %d (%s): want chDB's code %d, got %v", round, i+1, s.Kind, code, err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("password leaked into an error: %v", err)
			}
		default:
			t.Fatalf("round %d statement %d (%s): %v", round, i+1, s.Kind, err)
		}
	}
}

// TestRunnerApplyTwiceOnEngine: chDB can run none of the runner's statements (all access
// control), so locally this checks the split; on a real server the runner identity is applied
// twice and then must write coordination rows, and neither write the materialiser's tables
// nor read source data (hunts run as the hunts identity).
func TestRunnerApplyTwiceOnEngine(t *testing.T) {
	db, src := chtest.NewWithSchema(t), chtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := src.Conn.Exec(ctx, "CREATE TABLE events (x UInt8) ENGINE = MergeTree ORDER BY x"); err != nil {
		t.Fatal(err)
	}
	user := "hunt_runner_" + db.Name
	dropUserAtCleanup(t, db, user)
	p, err := Generate(Options{Role: RoleRunner, Database: db.Name, User: user})
	if err != nil {
		t.Fatal(err)
	}
	password, secret := testPassword()
	for round := 1; round <= 2; round++ {
		applyEach(t, ctx, db.Conn, p, password, secret, round)
	}
	if !onRealServer() {
		return
	}
	conn := connectAs(t, db, user, password)
	if err := conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_state (hunt_id) VALUES ('x')"); err != nil {
		t.Errorf("runner cannot write hunt_state: %v", err)
	}
	if err := conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_runner_heartbeat (owner) VALUES ('x')"); err != nil {
		t.Errorf("runner cannot write its heartbeat: %v", err)
	}
	for _, refused := range []string{
		"INSERT INTO " + db.Name + ".hunt_request (hunt_id) VALUES ('x')",
		"INSERT INTO " + db.Name + ".hunt_schedule (hunt_id) VALUES ('x')",
		"SELECT count() FROM " + src.Name + ".events",
		"SELECT * FROM url('http://127.0.0.1:1/', CSV, 'a String')",
		"CREATE TABLE " + db.Name + ".extra (a UInt8) ENGINE = Memory",
		"SELECT count() FROM system.users",
	} {
		if err := conn.Exec(ctx, refused); err == nil {
			t.Errorf("runner may run %s", refused)
		}
	}
}

// TestHuntsApplyTwiceOnEngine: on a real server the hunts identity reads its source database and
// nothing else: not hunt-runner's tables, no writes, no url(), and its profile's readonly and
// limits cannot be lifted by a query.
func TestHuntsApplyTwiceOnEngine(t *testing.T) {
	db, src := chtest.NewWithSchema(t), chtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := src.Conn.Exec(ctx, "CREATE TABLE events (x UInt8) ENGINE = MergeTree ORDER BY x"); err != nil {
		t.Fatal(err)
	}
	user := "hunt_hunts_" + db.Name
	dropUserAtCleanup(t, db, user)
	if onRealServer() {
		t.Cleanup(func() {
			_ = db.Conn.Exec(context.Background(), "DROP SETTINGS PROFILE IF EXISTS "+schema.QuoteIdent(user+"_profile"))
		})
	}
	p, err := Generate(Options{Role: RoleHunts, Database: db.Name, User: user, SourceDatabases: []string{src.Name}, MaxExecutionTime: 60})
	if err != nil {
		t.Fatal(err)
	}
	password, secret := testPassword()
	for round := 1; round <= 2; round++ {
		applyEach(t, ctx, db.Conn, p, password, secret, round)
	}
	if !onRealServer() {
		return
	}
	conn := connectAs(t, db, user, password)
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+src.Name+".events").Scan(&n); err != nil {
		t.Errorf("hunts cannot read the source database: %v", err)
	}
	lowered := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_execution_time": 30}))
	if err := conn.QueryRow(lowered, "SELECT count() FROM "+src.Name+".events").Scan(&n); err != nil {
		t.Errorf("the runner cannot lower the time limit per query: %v", err)
	}
	for _, refused := range []string{
		"SELECT count() FROM " + db.Name + ".hunt_findings",
		"INSERT INTO " + src.Name + ".events VALUES (1)",
		"SELECT * FROM url('http://127.0.0.1:1/', CSV, 'a String')",
		"SELECT * FROM remote('127.0.0.1', system.one)",
		"SELECT count() FROM system.users",
		"SELECT 1 SETTINGS readonly = 0",
		"SELECT 1 SETTINGS max_execution_time = 100000",
		"SELECT 1 SETTINGS max_memory_usage = 0",
		"SELECT 1 SETTINGS max_result_bytes = 0",
		"SELECT 1 SETTINGS result_overflow_mode = 'break'",
	} {
		if err := conn.Exec(ctx, refused); err == nil {
			t.Errorf("hunts may run %s", refused)
		}
	}
}

// dropUserAtCleanup removes a user the test provisions on a real server, registered before
// the user is created so that a failing test leaves none behind.
func dropUserAtCleanup(t *testing.T, db *chtest.DB, user string) {
	if onRealServer() {
		t.Cleanup(func() { _ = db.Conn.Exec(context.Background(), "DROP USER IF EXISTS "+schema.QuoteIdent(user)) })
	}
}

// connectAs opens a connection to db's server as user.
func connectAs(t *testing.T, db *chtest.DB, user, password string) driver.Conn {
	t.Helper()
	opts := *db.Options
	opts.Auth.Username, opts.Auth.Password = user, password
	conn, err := clickhouse.Open(&opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// checkScalerIdentity connects as the provisioned scaler: it reads the view and the layout
// version (the shim's layout check) and nothing else, and cannot write.
func checkScalerIdentity(t *testing.T, ctx context.Context, db *chtest.DB, user, password string) {
	conn := connectAs(t, db, user, password)
	var v uint64
	if err := conn.QueryRow(ctx, "SELECT value FROM "+db.Name+"."+store.ViewBacklog).Scan(&v); err != nil {
		t.Fatalf("scaler cannot read the view: %v", err)
	}
	if err := schema.CheckLayout(ctx, conn, db.Name); err != nil {
		t.Fatalf("the shim's layout check as the scaler: %v", err)
	}
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+db.Name+".hunt_schedule").Scan(&v); err == nil {
		t.Fatal("scaler can read hunt_schedule directly")
	}
	if err := conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_request (hunt_id) VALUES ('x')"); err == nil {
		t.Fatal("scaler can insert")
	}
}

// TestStatementsParseOnEngine asks the engine's own parser (formatQuery) about every statement of
// every role, including the access-control ones chDB cannot execute.
func TestStatementsParseOnEngine(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	for _, o := range []Options{
		{Role: RoleScaler, Database: db.Name},
		{Role: RoleRunner, Database: db.Name},
		{Role: RoleMaterialiser, Database: db.Name, RotatePassword: true},
		{Role: RoleHunts, Database: db.Name, SourceDatabases: []string{"logs", "edr"}, RotatePassword: true},
		{Role: RoleScaler, Database: db.Name, Cluster: "main"},
	} {
		p, err := Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range p.Statements {
			var formatted string
			if err := db.Conn.QueryRow(ctx, "SELECT formatQuery({q:String})", clickhouse.Named("q", s.SQL)).Scan(&formatted); err != nil {
				t.Errorf("%s statement %d (%s) does not parse: %v\n%s", o.Role, i+1, s.Kind, err, s.SQL)
			}
		}
	}
	for _, cluster := range []string{"", "main"} {
		var formatted string
		if err := db.Conn.QueryRow(ctx, "SELECT formatQuery({q:String})", clickhouse.Named("q", store.BacklogViewSQL(db.Name, cluster))).Scan(&formatted); err != nil {
			t.Errorf("backlog view (cluster %q) does not parse: %v", cluster, err)
		}
	}
}

// TestApplyScrubsThePasswordFromErrors makes the server echo the statement in its error (a
// syntax error right after the password): the error Apply returns must not carry it.
func TestApplyScrubsThePasswordFromErrors(t *testing.T) {
	db := chtest.New(t)
	secret := rand.Text()
	p := &Plan{Statements: []Statement{{Kind: KindUser, SQL: "SELECT '" + PasswordPlaceholder + "' FROM FROM"}}}
	_, err := p.Apply(context.Background(), db.Conn, "it's-"+secret)
	var ae *ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("Apply = %v, want an *ApplyError", err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("the password is in the error: %v", err)
	}
	if !strings.Contains(err.Error(), "[redacted]") {
		t.Fatalf("the server did not echo the statement, so scrubbing was not exercised: %v", err)
	}
}
