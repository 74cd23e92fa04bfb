// Package provision generates the SQL that creates hunt-runner's least-privilege ClickHouse
// identities, for an operator to review and then apply:
//
//   - scaler: reads one number, the due backlog, and nothing else. The SQL SECURITY DEFINER view
//     hunt_backlog_v1 (created by `hunt-runner schema` from store.BacklogViewSQL, so that the backlog
//     is right before any identity exists) returns the capped due count (no hunt ids, no table
//     contents); the user may SELECT that view only, under a settings profile with readonly = 1
//     and a 5 s max_execution_time. The KEDA shim (or KEDA's native ClickHouse trigger)
//     connects as it.
//   - runner: exactly what the runner's own statements need: SELECT and INSERT on the lease,
//     watermark, state, run, findings and heartbeat tables and on the notification delivery
//     and suppression tables (its dispatcher writes them), SELECT on the other coordination
//     tables (the schedule, publish and request tables only materialise and trigger write),
//     SELECT on the two system tables it consults. No source data: hunts run as the hunts
//     identity.
//   - materialiser: SELECT and INSERT on the schedule, publish and request tables, for
//     `materialise` and `trigger`, and nothing else.
//   - hunts: the identity hunt queries run as. SELECT on the named source databases only (given
//     by the operator, never derived from hunt text), under a settings profile with a CONST
//     readonly and MAX limits on execution time and memory. No table-function privileges (url,
//     s3, remote, file, …) and nothing on hunt-runner's own database, so a hunt can neither
//     reach outside the server, nor write, nor read or forge other hunts' findings.
//
// The text is deterministic and repeatable: every statement converges (CREATE … IF NOT EXISTS
// followed by ALTER, GRANT … WITH REPLACE OPTION), so applying it twice
// changes nothing; an existing user keeps its password unless RotatePassword adds the ALTER
// USER … IDENTIFIED statement. Passwords never appear in it: the printed SQL carries PasswordPlaceholder,
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

	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// PasswordPlaceholder stands for the password in printed SQL.
const PasswordPlaceholder = "<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>"

// Role is an identity to provision.
type Role string

// The roles.
const (
	RoleScaler       Role = "scaler"
	RoleRunner       Role = "runner"
	RoleMaterialiser Role = "materialiser"
	RoleHunts        Role = "hunts"
)

// Roles lists every role, for usage text.
var Roles = []Role{RoleRunner, RoleMaterialiser, RoleHunts, RoleScaler}

// Defaults of the hunts identity's settings profile.
const (
	DefaultHuntsMaxExecutionTime = 3600    // seconds; a hunt's timeout: may not exceed it
	DefaultHuntsMaxMemoryUsage   = 8 << 30 // bytes per query
	// DefaultHuntsMaxResultBytes is the profile's ceiling on a query's result: a backstop
	// far above the runner's own per-run findings cap, which the statement enforces; it is
	// also applied to each shard's partial result of a distributed query, so it stays large.
	DefaultHuntsMaxResultBytes = 1 << 30
	maxHuntsMemoryUsage        = 1 << 40      // a sanity bound on the option
	defaultScalerExecutionTime = 5            // seconds
	maxExecutionTimeBound      = 24 * 60 * 60 // a sanity bound on the option
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
	// User is the identity to create (default "hunt_" + the role, as hunt_runner).
	User string
	// SourceDatabases are the databases hunts may read (hunts only, required there).
	SourceDatabases []string
	// RotatePassword adds a statement setting the user's password, so re-applying rotates it.
	// Without it an existing user keeps its password.
	RotatePassword bool
	// MaxMemoryUsage is the hunts profile's per-query memory ceiling in bytes (default
	// DefaultHuntsMaxMemoryUsage).
	MaxMemoryUsage int64
	// MaxResultBytes is the hunts profile's ceiling on a query's result in bytes, over which
	// the query fails (default DefaultHuntsMaxResultBytes).
	MaxResultBytes int64
	// Cluster adds ON CLUSTER to every statement, for servers whose access entities are not
	// replicated (leave empty with replicated access storage or a single node).
	Cluster string
	// MaxExecutionTime is the profile's server-side limit in seconds: the scaler's (default 5)
	// or the ceiling of the hunts' (default DefaultHuntsMaxExecutionTime).
	MaxExecutionTime int
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,127}$`)

func (o Options) withDefaults() (Options, error) {
	if o.Database == "" {
		o.Database = "hunt_runner"
	}
	if !slices.Contains(Roles, o.Role) {
		return o, fmt.Errorf("%w: role %q: want one of runner, materialiser, hunts, scaler", ErrInvalid, o.Role)
	}
	if o.User == "" {
		o.User = "hunt_" + string(o.Role)
	}
	switch {
	case o.Role == RoleHunts && len(o.SourceDatabases) == 0:
		return o, fmt.Errorf("%w: --role hunts needs at least one --source-database: the databases hunts may read are named by the operator, never taken from hunt text", ErrInvalid)
	case o.Role != RoleHunts && len(o.SourceDatabases) > 0:
		return o, fmt.Errorf("%w: source databases apply to --role hunts only (hunts run as that identity)", ErrInvalid)
	case o.Role != RoleHunts && o.MaxMemoryUsage != 0:
		return o, fmt.Errorf("%w: a memory limit applies to --role hunts only", ErrInvalid)
	case o.Role != RoleHunts && o.MaxResultBytes != 0:
		return o, fmt.Errorf("%w: a result-bytes limit applies to --role hunts only", ErrInvalid)
	}
	if o.MaxExecutionTime == 0 {
		o.MaxExecutionTime = defaultScalerExecutionTime
		if o.Role == RoleHunts {
			o.MaxExecutionTime = DefaultHuntsMaxExecutionTime
		}
	}
	if o.MaxExecutionTime < 1 || o.MaxExecutionTime > maxExecutionTimeBound {
		return o, fmt.Errorf("%w: max execution time %d s out of range", ErrInvalid, o.MaxExecutionTime)
	}
	if o.Role == RoleHunts && o.MaxMemoryUsage == 0 {
		o.MaxMemoryUsage = DefaultHuntsMaxMemoryUsage
	}
	if o.MaxMemoryUsage < 0 || o.MaxMemoryUsage > maxHuntsMemoryUsage {
		return o, fmt.Errorf("%w: max memory usage %d bytes out of range", ErrInvalid, o.MaxMemoryUsage)
	}
	if o.Role == RoleHunts && o.MaxResultBytes == 0 {
		o.MaxResultBytes = DefaultHuntsMaxResultBytes
	}
	if o.MaxResultBytes < 0 || o.MaxResultBytes > maxHuntsMemoryUsage {
		return o, fmt.Errorf("%w: max result bytes %d out of range", ErrInvalid, o.MaxResultBytes)
	}
	if strings.EqualFold(o.User, "default") {
		return o, fmt.Errorf("%w: user %q: provision a dedicated user, never ClickHouse's default", ErrInvalid, o.User)
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
		if db == o.Database {
			return o, fmt.Errorf("%w: source database %q is hunt-runner's own database; hunts may never read it", ErrInvalid, db)
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
	case RoleMaterialiser:
		p.materialiser()
	case RoleHunts:
		p.hunts()
	}
	if o.RotatePassword {
		p.add(KindUser, "ALTER USER %s%s IDENTIFIED WITH sha256_password BY '%s'", schema.QuoteIdent(o.User), p.onCluster(), PasswordPlaceholder)
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
	return " ON CLUSTER " + schema.QuoteIdent(p.Options.Cluster)
}

func (p *Plan) scaler() {
	o := p.Options
	db, user, profile := schema.QuoteIdent(o.Database), schema.QuoteIdent(o.User), schema.QuoteIdent(o.User+"_profile")
	settings := fmt.Sprintf("readonly = 1, max_execution_time = %d", o.MaxExecutionTime)
	// The view itself comes from `hunt-runner schema` (store.BacklogViewSQL); granting on it before it
	// exists is allowed, so the order of schema and provision does not matter.
	p.add(KindProfile, "CREATE SETTINGS PROFILE IF NOT EXISTS %s%s SETTINGS %s", profile, p.onCluster(), settings)
	p.add(KindProfile, "ALTER SETTINGS PROFILE %s%s SETTINGS %s", profile, p.onCluster(), settings)
	p.add(KindUser, "CREATE USER IF NOT EXISTS %s%s IDENTIFIED WITH sha256_password BY '%s'\nDEFAULT DATABASE %s SETTINGS PROFILE %s",
		user, p.onCluster(), PasswordPlaceholder, db, profile)
	p.add(KindUser, "ALTER USER %s%s DEFAULT DATABASE %s SETTINGS PROFILE %s", user, p.onCluster(), db, profile)
	// Besides the view, it reads what schema.Grants lists for it: hunt_schema only, as the shim
	// refuses a database of another layout (schema.CheckLayout).
	privs := []string{store.BacklogPrivilege(o.Database)}
	privs = append(privs, tablePrivileges(o.Database, schema.IdentityScaler)...)
	p.add(KindGrant, "GRANT%s %s TO %s WITH REPLACE OPTION", p.onCluster(), strings.Join(privs, ", "), user)
}

// runnerSystemTables are the system tables the runner reads: system.databases (the connection
// check) and system.replicas (replica delay, bounding the claim settle).
var runnerSystemTables = []string{"databases", "replicas"}

// user creates the role's user, with its default database; its password is set only at
// creation (or by RotatePassword).
func (p *Plan) user(defaultDB, profile string) {
	o := p.Options
	user := schema.QuoteIdent(o.User)
	settings := ""
	if profile != "" {
		settings = " SETTINGS PROFILE " + schema.QuoteIdent(profile)
	}
	p.add(KindUser, "CREATE USER IF NOT EXISTS %s%s IDENTIFIED WITH sha256_password BY '%s'\nDEFAULT DATABASE %s%s",
		user, p.onCluster(), PasswordPlaceholder, schema.QuoteIdent(defaultDB), settings)
	p.add(KindUser, "ALTER USER %s%s DEFAULT DATABASE %s%s", user, p.onCluster(), schema.QuoteIdent(defaultDB), settings)
}

// grant replaces the user's privileges with exactly privs, in one step, whatever it held.
func (p *Plan) grant(privs []string) {
	p.add(KindGrant, "GRANT%s\n  %s\nTO %s WITH REPLACE OPTION", p.onCluster(), strings.Join(privs, ",\n  "), schema.QuoteIdent(p.Options.User))
}

// tablePrivileges are the privileges on hunt-runner's tables that schema.Grants gives id: the
// one list of which identity reads and writes which table. The runner's notification
// dispatcher (run --notify-config) writes the delivery and suppression tables; cmd's
// TestRunnerRoleGrantsEveryTableRunWrites checks the list against what a real run inserts into.
func tablePrivileges(database string, id schema.Identity) []string {
	var privs []string
	for _, a := range schema.Grants(id) {
		grant := "SELECT"
		if a.Insert {
			grant = "SELECT, INSERT"
		}
		privs = append(privs, fmt.Sprintf("%s ON %s.%s", grant, schema.QuoteIdent(database), schema.QuoteIdent(a.Table)))
	}
	return privs
}

func (p *Plan) runner() {
	o := p.Options
	p.user(o.Database, "")
	privs := tablePrivileges(o.Database, schema.IdentityRunner)
	for _, t := range runnerSystemTables {
		privs = append(privs, fmt.Sprintf("SELECT ON system.%s", schema.QuoteIdent(t)))
	}
	p.grant(privs)
}

func (p *Plan) materialiser() {
	o := p.Options
	p.user(o.Database, "")
	privs := append(tablePrivileges(o.Database, schema.IdentityMaterialiser), "SELECT ON system.`databases`")
	p.grant(privs)
}

// hunts is the identity hunt queries run as. readonly = 2 (CONST) allows reads only, while the
// runner may still lower a query's limits (max_execution_time from the hunt's timeout) within
// the MAX constraints; readonly = 1 would refuse every per-query setting.
func (p *Plan) hunts() {
	o := p.Options
	profile := o.User + "_profile"
	// result_overflow_mode is CONST 'throw': a hunt cannot turn the result ceiling into a
	// silent cut ('break'), which would commit a partial window as if it were whole.
	settings := fmt.Sprintf("readonly = 2 CONST, allow_ddl = 0 CONST, allow_introspection_functions = 0 CONST, "+
		"max_execution_time = %d MAX %d, max_memory_usage = %d MAX %d, max_result_bytes = %d MAX %d, result_overflow_mode = 'throw' CONST",
		o.MaxExecutionTime, o.MaxExecutionTime, o.MaxMemoryUsage, o.MaxMemoryUsage, o.MaxResultBytes, o.MaxResultBytes)
	p.add(KindProfile, "CREATE SETTINGS PROFILE IF NOT EXISTS %s%s SETTINGS %s", schema.QuoteIdent(profile), p.onCluster(), settings)
	p.add(KindProfile, "ALTER SETTINGS PROFILE %s%s SETTINGS %s", schema.QuoteIdent(profile), p.onCluster(), settings)
	p.user(o.SourceDatabases[0], profile)
	var privs []string
	for _, src := range o.SourceDatabases {
		privs = append(privs, fmt.Sprintf("SELECT ON %s.*", schema.QuoteIdent(src)))
	}
	p.grant(privs)
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
	if o.Role == RoleHunts {
		fmt.Fprintf(&b, "-- source databases hunts may read: %s\n", strings.Join(o.SourceDatabases, ", "))
	}
	b.WriteString("-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.\n")
	if o.RotatePassword {
		b.WriteString("-- Applying this sets the password of an existing user too (rotation).\n")
	} else {
		b.WriteString("-- Repeatable: applying this again changes nothing (an existing user keeps its password).\n")
	}
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
