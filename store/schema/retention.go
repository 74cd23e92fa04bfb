package schema

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Retention of findings and of commit rows.
//
// A committed run's findings are visible (hunt_findings_committed) only while its commit row
// names its run_id in hunt_watermark. Past the commits retention a merge rolls a hunt's old
// commit rows up into one, the newest, so that an idle hunt keeps its progress: the runs of the
// other rows are then no longer committed as far as the view can tell. Commit rows are therefore
// always kept at least as long as findings (Retention.resolve refuses anything else), plus
// rollupMarginDays, and the roll-up sets every column from the newest row, so the row that
// survives is that run's record unchanged.

// DefaultFindingsTTLDays is how long findings are kept unless `schema --findings-ttl` says
// otherwise; the DDL creates hunt_findings with it (as hunt_run keeps its rows).
const DefaultFindingsTTLDays = 90

// DefaultCommitsTTLDays is how long each commit row is kept as written (the committed run's
// record in hunt_runs) when `schema --commits-ttl` is not given and findings are not kept
// longer.
const DefaultCommitsTTLDays = 90

// rollupMarginDays is how long after the commits retention the roll-up happens. A finding's
// `found` is the runner's clock and its commit's `updated` the server's: the margin keeps the
// commit row past the finding's TTL even when the runner's clock runs ahead.
const rollupMarginDays = 1

// ErrRetention means retention settings that contradict each other.
var ErrRetention = errors.New("retention")

// Retention is what `schema` keeps, in whole days.
type Retention struct {
	// FindingsDays is hunt_findings' TTL; 0 means DefaultFindingsTTLDays.
	FindingsDays int
	// CommitsDays is how long commit rows are kept before a hunt's older ones roll up into its
	// newest; 0 means the longer of DefaultCommitsTTLDays and FindingsDays. It may not be
	// shorter than FindingsDays: committed findings would be hidden while still kept.
	CommitsDays int
}

// resolve fills the defaults and refuses contradictory settings.
func (r Retention) resolve() (Retention, error) {
	if r.FindingsDays == 0 {
		r.FindingsDays = DefaultFindingsTTLDays
	}
	if r.FindingsDays < 1 || r.CommitsDays < 0 {
		return r, fmt.Errorf("%w: findings %d day(s), commits %d day(s): want at least 1 day each", ErrRetention, r.FindingsDays, r.CommitsDays)
	}
	if r.CommitsDays == 0 {
		r.CommitsDays = max(DefaultCommitsTTLDays, r.FindingsDays)
	}
	if r.CommitsDays < r.FindingsDays {
		return r, fmt.Errorf("%w: commit rows kept %d day(s) but findings %d: a committed run's findings are visible only while "+
			"its commit row is, so they would be hidden for the last %d day(s); keep commits at least as long as findings "+
			"(--commits-ttl %dd, or leave it out to follow --findings-ttl)", ErrRetention, r.CommitsDays, r.FindingsDays,
			r.FindingsDays-r.CommitsDays, r.FindingsDays)
	}
	return r, nil
}

// findingsTTL is hunt_findings' TTL expression for days, as the DDL writes it.
func findingsTTL(days int) string { return fmt.Sprintf("toDateTime(found) + INTERVAL %d DAY", days) }

// watermarkTTL is hunt_watermark's roll-up for a commits retention of days: every column but
// the key is set from the row with the greatest watermark, so the row that survives is one
// run's record as it was written, never a mix (columns left out of SET take any row's value).
// The compare-and-set commit makes a hunt's watermarks distinct (a TTL aggregate cannot take a
// tuple, which would add updated as a tie-break); argMax keeps the first of equal maxima in
// every column alike, so even a tie leaves one row's values.
func watermarkTTL(days int) string {
	var set []string
	for _, c := range watermarkColumns {
		if c.name != "hunt_id" {
			set = append(set, fmt.Sprintf("%s = argMax(%s, watermark)", c.name, c.name))
		}
	}
	return fmt.Sprintf("toDateTime(updated) + INTERVAL %d DAY GROUP BY hunt_id SET %s", days+rollupMarginDays, strings.Join(set, ", "))
}

var intervalDays = regexp.MustCompile(`INTERVAL (\d+) DAY`)

// shownTTL is a TTL expression of this file as the server shows it in system.tables.engine_full.
func shownTTL(expr string) string { return intervalDays.ReplaceAllString(expr, "toIntervalDay($1)") }

var shownDays = regexp.MustCompile(`toIntervalDay\((\d+)\)`)

// ttlDays is the day count of a TTL as the server shows it; ok is false without one.
func ttlDays(shown string) (days int, ok bool) {
	m := shownDays.FindStringSubmatch(shown)
	if m == nil {
		return 0, false
	}
	d, err := strconv.Atoi(m[1])
	return d, err == nil
}

// ttlClause is the table TTL in an engine_full text, "" when there is none.
func ttlClause(engine string) string {
	_, rest, ok := strings.Cut(engine, " TTL ")
	if !ok {
		return ""
	}
	ttl, _, _ := strings.Cut(rest, " SETTINGS ")
	return strings.TrimSpace(ttl)
}

// retentionStep is one table's TTL: what it is and what it should be.
type retentionStep struct {
	table, current, want string
}

func (s retentionStep) differs() bool { return s.current != shownTTL(s.want) }

// RetentionStatements are the ALTERs that set r on a database created by DDL (which carries the
// defaults), for `schema --print`; none when r is the default.
func RetentionStatements(database string, t Topology, cluster string, r Retention) ([]Statement, error) {
	r, err := r.resolve()
	if err != nil {
		return nil, err
	}
	def, _ := Retention{}.resolve()
	var out []Statement
	// Longer commit rows first, shorter findings first: no step hides committed findings.
	if r.CommitsDays > def.CommitsDays {
		out = append(out, modifyTTL(database, t, cluster, TableWatermark, watermarkTTL(r.CommitsDays)))
	}
	if r.FindingsDays != def.FindingsDays {
		out = append(out, modifyTTL(database, t, cluster, TableFindings, findingsTTL(r.FindingsDays)))
	}
	if r.CommitsDays < def.CommitsDays {
		out = append(out, modifyTTL(database, t, cluster, TableWatermark, watermarkTTL(r.CommitsDays)))
	}
	return out, nil
}

// ApplyRetention sets the TTLs of hunt_findings and hunt_watermark to r where they differ and
// says what it changed (nothing when they match). Contradictory settings are an ErrRetention
// and change nothing. The order keeps the promise at every step: commit rows are lengthened
// before findings, and findings shortened before commit rows. Each change is metadata only
// (materialize_ttl_after_modify = 0): existing parts are not rewritten, their rows expire or
// roll up as merges reach them, so a new TTL on a large table costs no immediate mutation.
func ApplyRetention(ctx context.Context, conn driver.Conn, database string, t Topology, cluster string, r Retention) ([]string, error) {
	r, err := r.resolve()
	if err != nil {
		return nil, err
	}
	ttls, err := tableTTLs(ctx, conn, database)
	if err != nil {
		return nil, err
	}
	wm := retentionStep{TableWatermark, ttls[TableWatermark], watermarkTTL(r.CommitsDays)}
	fd := retentionStep{TableFindings, ttls[TableFindings], findingsTTL(r.FindingsDays)}
	steps := []retentionStep{wm, fd}
	if cur, ok := ttlDays(wm.current); ok && cur > r.CommitsDays+rollupMarginDays {
		steps = []retentionStep{fd, wm} // commit rows get shorter: findings first
	}
	var did []string
	for _, s := range steps {
		if !s.differs() {
			continue
		}
		if err := conn.Exec(ctx, modifyTTL(database, t, cluster, s.table, s.want).SQL); err != nil {
			return did, fmt.Errorf("retention: modify %s TTL: %w", s.table, err)
		}
		did = append(did, fmt.Sprintf("changed %s TTL from %s to %s (existing parts change as they merge)",
			s.table, orNone(s.current), shownTTL(s.want)))
	}
	return did, nil
}

// upgradeRollup replaces a roll-up of an earlier layout (one that left columns to chance, or
// that could end before the findings TTL) by the current one, keeping the retention the tables
// have: the findings TTL, and commit rows at least as long. It is a step of Apply's upgrade.
func upgradeRollup(ctx context.Context, conn driver.Conn, database, onCluster string) ([]string, error) {
	ttls, err := tableTTLs(ctx, conn, database)
	if err != nil {
		return nil, err
	}
	cur := ttls[TableWatermark]
	if d, ok := ttlDays(cur); ok && cur == shownTTL(watermarkTTL(d-rollupMarginDays)) {
		if f, ok := ttlDays(ttls[TableFindings]); !ok || d-rollupMarginDays >= f {
			return nil, nil
		}
	}
	var r Retention
	if f, ok := ttlDays(ttls[TableFindings]); ok {
		r.FindingsDays = f
	}
	if r, err = r.resolve(); err != nil {
		return nil, fmt.Errorf("upgrade: %w", err)
	}
	want := watermarkTTL(r.CommitsDays)
	q := "ALTER TABLE " + QuoteIdent(database) + "." + QuoteIdent(TableWatermark) + onCluster +
		" MODIFY TTL " + want + " SETTINGS materialize_ttl_after_modify = 0"
	if err := conn.Exec(ctx, q); err != nil {
		return nil, fmt.Errorf("upgrade: replace the %s roll-up: %w", TableWatermark, err)
	}
	return []string{fmt.Sprintf("replaced the %s roll-up (%s) by one that keeps each commit row as long as its findings "+
		"and sets every column from the newest row (%s)", TableWatermark, orNone(cur), shownTTL(want))}, nil
}

func modifyTTL(database string, t Topology, cluster, table, ttl string) Statement {
	onCluster := ""
	if t == TopologyCluster {
		onCluster = " ON CLUSTER " + quoteString(cluster)
	}
	return Statement{
		Name: "retention " + database + "." + table,
		SQL: "ALTER TABLE " + QuoteIdent(database) + "." + QuoteIdent(table) + onCluster +
			" MODIFY TTL " + ttl + " SETTINGS materialize_ttl_after_modify = 0",
	}
}

// tableTTLs reads the TTL of every table of database as the server shows it.
func tableTTLs(ctx context.Context, conn driver.Conn, database string) (map[string]string, error) {
	rows, err := conn.Query(ctx, "SELECT name, engine_full FROM system.tables WHERE database = ?", database)
	if err != nil {
		return nil, fmt.Errorf("retention: read system.tables: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, engine string
		if err := rows.Scan(&name, &engine); err != nil {
			return nil, fmt.Errorf("retention: read system.tables: %w", err)
		}
		out[name] = ttlClause(engine)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("retention: read system.tables: %w", err)
	}
	for _, t := range []string{TableWatermark, TableFindings} {
		if _, ok := out[t]; !ok {
			return nil, fmt.Errorf("retention: no table %s.%s: run `hunt-runner schema`", database, t)
		}
	}
	return out, nil
}

func orNone(ttl string) string {
	if ttl == "" {
		return "none"
	}
	return ttl
}
