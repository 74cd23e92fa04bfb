// Package provision generates the SQL that creates hunt-runner's least-privilege ClickHouse
// identities, for an operator to review and then apply:
//
//   - scaler: reads one number, the due backlog, and nothing else. The SQL SECURITY DEFINER view
//     hunt_backlog_v1 (created by `hunt-runner schema` from BacklogViewSQL, so that the backlog
//     is right before any identity exists) returns the capped due count (no hunt ids, no table
//     contents); the user may SELECT that view only, under a settings profile with readonly = 1
//     and a 5 s max_execution_time. The KEDA shim (or KEDA's native ClickHouse trigger)
//     connects as it.
//   - runner: exactly what the runner's statements need: SELECT and INSERT on the coordination
//     and findings tables, SELECT on the source databases its hunts read, SELECT on the two
//     system tables it consults. No table-function privileges (url, s3, remote, file, …), so
//     no hunt can reach outside the server.
//
// The text is deterministic and repeatable: every statement converges (CREATE … IF NOT EXISTS
// followed by ALTER, GRANT … WITH REPLACE OPTION), so applying it twice
// changes nothing. Passwords never appear in it: the printed SQL carries PasswordPlaceholder,
// which Apply substitutes (only in the statement sent to the server). The SHA-256 of the text
// lets the reviewed text and the applied text be matched.
package provision

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/schedule"
)

// BacklogView is the view the scaler identity reads. The suffix versions its meaning: one row,
// one column `value`, the number of due hunts capped at BacklogCap.
const BacklogView = "hunt_backlog_v1"

// BacklogCap bounds the number the view returns, so that a runaway schedule cannot ask for an
// absurd replica count (KEDA's maxReplicaCount is the real bound).
const BacklogCap = 100000

// PasswordPlaceholder stands for the password in printed SQL.
const PasswordPlaceholder = "<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>"

// Role is an identity to provision.
type Role string

// The roles.
const (
	RoleScaler Role = "scaler"
	RoleRunner Role = "runner"
)

// Statement kinds, so that a caller (or a test on an engine with no access storage) can tell
// the statements apart.
const (
	KindProfile = "profile"
	KindUser    = "user"
	KindGrant   = "grant"
)

// ErrInvalid marks bad options.
var ErrInvalid = errors.New("provision")

// Options select what to generate.
type Options struct {
	Role Role
	// Database holds the coordination tables (default "hunt_runner").
	Database string
	// User is the identity to create (default "hunt_scaler" or "hunt_runner").
	User string
	// SourceDatabases are the databases the runner's hunts read (runner only).
	SourceDatabases []string
	// Cluster adds ON CLUSTER to every statement, for servers whose access entities are not
	// replicated (leave empty with replicated access storage or a single node).
	Cluster string
	// MaxExecutionTime is the scaler profile's server-side limit in seconds (default 5).
	MaxExecutionTime int
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,127}$`)

func (o Options) withDefaults() (Options, error) {
	if o.Database == "" {
		o.Database = "hunt_runner"
	}
	switch o.Role {
	case RoleScaler:
		if o.User == "" {
			o.User = "hunt_scaler"
		}
		if len(o.SourceDatabases) > 0 {
			return o, fmt.Errorf("%w: source databases apply to --role runner only", ErrInvalid)
		}
	case RoleRunner:
		if o.User == "" {
			o.User = "hunt_runner"
		}
	default:
		return o, fmt.Errorf("%w: role %q: want scaler or runner", ErrInvalid, o.Role)
	}
	if o.MaxExecutionTime == 0 {
		o.MaxExecutionTime = 5
	}
	if o.MaxExecutionTime < 1 || o.MaxExecutionTime > 3600 {
		return o, fmt.Errorf("%w: max execution time %d s out of range", ErrInvalid, o.MaxExecutionTime)
	}
	for _, f := range []struct{ what, name string }{{"database", o.Database}, {"user", o.User}} {
		if !identRE.MatchString(f.name) {
			return o, fmt.Errorf("%w: %s %q must match %s", ErrInvalid, f.what, f.name, identRE)
		}
	}
	if o.Cluster != "" && !identRE.MatchString(o.Cluster) {
		return o, fmt.Errorf("%w: cluster %q must match %s", ErrInvalid, o.Cluster, identRE)
	}
	src := map[string]bool{}
	for _, db := range o.SourceDatabases {
		if !identRE.MatchString(db) {
			return o, fmt.Errorf("%w: source database %q must match %s", ErrInvalid, db, identRE)
		}
		if strings.EqualFold(db, "system") || strings.EqualFold(db, "information_schema") {
			return o, fmt.Errorf("%w: source database %q: system databases are never granted whole", ErrInvalid, db)
		}
		src[db] = true
	}
	o.SourceDatabases = slices.Sorted(func(yield func(string) bool) {
		for db := range src {
			if !yield(db) {
				return
			}
		}
	})
	return o, nil
}

// Statement is one SQL statement, with PasswordPlaceholder where a password goes.
type Statement struct {
	Kind string
	SQL  string
}

// Plan is the generated SQL.
type Plan struct {
	Options    Options
	Statements []Statement
}

// Generate builds the statements for o.
func Generate(o Options) (*Plan, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Plan{Options: o}
	switch o.Role {
	case RoleScaler:
		p.scaler()
	case RoleRunner:
		p.runner()
	}
	return p, nil
}

func (p *Plan) add(kind, format string, args ...any) {
	p.Statements = append(p.Statements, Statement{Kind: kind, SQL: fmt.Sprintf(format, args...)})
}

func (p *Plan) onCluster() string {
	if p.Options.Cluster == "" {
		return ""
	}
	return " ON CLUSTER " + chstore.QuoteIdent(p.Options.Cluster)
}

// BacklogViewSelect is the body of the backlog view: the due count of the schedule package
// (the same SQL `hunt-runner due` runs), capped, as one non-negative integer named value.
func BacklogViewSelect(database string) string {
	return fmt.Sprintf("SELECT toUInt64(least(due, %d)) AS value FROM (\n%s\n)", BacklogCap, schedule.DueCountSQL(database, "now()"))
}

// BacklogViewSQL creates or refreshes the backlog view; `hunt-runner schema` runs it (cluster
// adds ON CLUSTER), so the shim and KEDA read the true backlog before any identity exists, and
// a later schema picks up a changed due query. The definer (whoever applies the schema) reads
// the coordination tables on the scaler's behalf: the scaler gets no table privilege at all.
func BacklogViewSQL(database, cluster string) string {
	on := ""
	if cluster != "" {
		on = " ON CLUSTER " + chstore.QuoteIdent(cluster)
	}
	return fmt.Sprintf("CREATE OR REPLACE VIEW %s.%s%s\nDEFINER = CURRENT_USER SQL SECURITY DEFINER\nAS %s",
		chstore.QuoteIdent(database), chstore.QuoteIdent(BacklogView), on, BacklogViewSelect(database))
}

func (p *Plan) scaler() {
	o := p.Options
	db, user, profile := chstore.QuoteIdent(o.Database), chstore.QuoteIdent(o.User), chstore.QuoteIdent(o.User+"_profile")
	settings := fmt.Sprintf("readonly = 1, max_execution_time = %d", o.MaxExecutionTime)
	// The view itself comes from `hunt-runner schema` (BacklogViewSQL); granting on it before it
	// exists is allowed, so the order of schema and provision does not matter.
	p.add(KindProfile, "CREATE SETTINGS PROFILE IF NOT EXISTS %s%s SETTINGS %s", profile, p.onCluster(), settings)
	p.add(KindProfile, "ALTER SETTINGS PROFILE %s%s SETTINGS %s", profile, p.onCluster(), settings)
	p.add(KindUser, "CREATE USER IF NOT EXISTS %s%s IDENTIFIED WITH sha256_password BY '%s'\nDEFAULT DATABASE %s SETTINGS PROFILE %s",
		user, p.onCluster(), PasswordPlaceholder, db, profile)
	p.add(KindUser, "ALTER USER %s%s DEFAULT DATABASE %s SETTINGS PROFILE %s", user, p.onCluster(), db, profile)
	p.add(KindGrant, "GRANT%s SELECT ON %s.%s TO %s WITH REPLACE OPTION", p.onCluster(), db, chstore.QuoteIdent(BacklogView), user)
}

// runnerSystemTables are the system tables the runner reads: system.databases (the connection
// check) and system.replicas (replica delay, bounding the claim settle).
var runnerSystemTables = []string{"databases", "replicas"}

func (p *Plan) runner() {
	o := p.Options
	db, user := chstore.QuoteIdent(o.Database), chstore.QuoteIdent(o.User)
	p.add(KindUser, "CREATE USER IF NOT EXISTS %s%s IDENTIFIED WITH sha256_password BY '%s'\nDEFAULT DATABASE %s",
		user, p.onCluster(), PasswordPlaceholder, db)
	p.add(KindUser, "ALTER USER %s%s DEFAULT DATABASE %s", user, p.onCluster(), db)
	// One GRANT … WITH REPLACE OPTION: the user's privileges become exactly this list, in one
	// step, whatever it held before.
	var privs []string
	for _, t := range chstore.TableNames() {
		grant := "SELECT, INSERT"
		if t == chstore.TableFindings {
			// A committed run deletes the findings of attempts that never committed and whose
			// window it covers (runner.deleteOrphans); lightweight DELETE needs ALTER DELETE.
			grant += ", ALTER DELETE"
		}
		privs = append(privs, fmt.Sprintf("%s ON %s.%s", grant, db, chstore.QuoteIdent(t)))
	}
	for _, src := range o.SourceDatabases {
		privs = append(privs, fmt.Sprintf("SELECT ON %s.*", chstore.QuoteIdent(src)))
	}
	for _, t := range runnerSystemTables {
		privs = append(privs, fmt.Sprintf("SELECT ON system.%s", chstore.QuoteIdent(t)))
	}
	p.add(KindGrant, "GRANT%s\n  %s\nTO %s WITH REPLACE OPTION", p.onCluster(), strings.Join(privs, ",\n  "), user)
}

// Text is the reviewable SQL: a header comment and the statements, each ending in ";".
func (p *Plan) Text() string {
	o := p.Options
	var b strings.Builder
	fmt.Fprintf(&b, "-- hunt-runner provision --role %s: least-privilege ClickHouse identity %q\n", o.Role, o.User)
	fmt.Fprintf(&b, "-- coordination database %q", o.Database)
	if o.Cluster != "" {
		fmt.Fprintf(&b, ", ON CLUSTER %q", o.Cluster)
	}
	b.WriteString("\n")
	if o.Role == RoleRunner {
		if len(o.SourceDatabases) == 0 {
			b.WriteString("-- source databases: none (no hunt reads a database-qualified table)\n")
		} else {
			fmt.Fprintf(&b, "-- source databases: %s\n", strings.Join(o.SourceDatabases, ", "))
		}
	}
	b.WriteString("-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.\n")
	b.WriteString("-- Repeatable: applying this again changes nothing.\n")
	for _, s := range p.Statements {
		b.WriteString("\n")
		b.WriteString(s.SQL)
		b.WriteString(";\n")
	}
	return b.String()
}

// SHA256 is the hex SHA-256 of Text, printed after it so that the reviewed and the applied
// text can be matched (`head -n -1 | sha256sum`).
func (p *Plan) SHA256() string {
	sum := sha256.Sum256([]byte(p.Text()))
	return hex.EncodeToString(sum[:])
}

// Execer runs one statement; a clickhouse-go driver.Conn satisfies it.
type Execer interface {
	Exec(ctx context.Context, query string, args ...any) error
}

// Apply runs the statements in order, substituting password for the placeholder. The password
// is sent only inside the CREATE USER statement and scrubbed from any error. kinds, when not
// empty, limits Apply to those statement kinds.
func (p *Plan) Apply(ctx context.Context, conn Execer, password string, kinds ...string) (int, error) {
	needs := slices.ContainsFunc(p.Statements, func(s Statement) bool {
		return strings.Contains(s.SQL, PasswordPlaceholder) && (len(kinds) == 0 || slices.Contains(kinds, s.Kind))
	})
	if needs && password == "" {
		return 0, fmt.Errorf("%w: a password is required to apply (HUNT_RUNNER_PROVISION_PASSWORD or --password-file)", ErrInvalid)
	}
	n := 0
	for i, s := range p.Statements {
		if len(kinds) > 0 && !slices.Contains(kinds, s.Kind) {
			continue
		}
		sql := strings.ReplaceAll(s.SQL, PasswordPlaceholder, escapeString(password))
		if err := conn.Exec(ctx, sql); err != nil {
			return n, &ApplyError{Index: i, Kind: s.Kind, Statement: firstLine(s.SQL), msg: scrub(err.Error(), password, escapeString(password))}
		}
		n++
	}
	return n, nil
}

// ApplyError is a failed statement. It keeps only the scrubbed text of the driver error, never
// the error itself, which could carry the password.
type ApplyError struct {
	Index     int
	Kind      string
	Statement string // first line, with the placeholder
	msg       string
}

func (e *ApplyError) Error() string {
	return fmt.Sprintf("provision: statement %d (%s) %q: %s", e.Index+1, e.Kind, e.Statement, e.msg)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func scrub(msg string, secrets ...string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	return msg
}

// escapeString escapes s for a single-quoted ClickHouse string literal.
func escapeString(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)
}
