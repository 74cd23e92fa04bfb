package attrib

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/store/schema"
)

// QueryLogDefault is the table Leaderboard reads: the server's query log.
const QueryLogDefault = "system.query_log"

// Grouping of a leaderboard.
const (
	ByHunt = "hunt"
	BySet  = "set"
)

// Keys of the rows that are not one hunt's (or one set's).
const (
	KeyCoordination = "(coordination)" // claims, commits, snapshots: the runners' own statements
	KeyNoSet        = "(no set)"       // previews, tests and estimates, which belong to no hunt set
)

// CostOptions say what Leaderboard reads.
type CostOptions struct {
	Since time.Duration // the period: [now − Since, now) on the server's clock, compared with the one before
	By    string        // ByHunt (default) or BySet
	// QueryLog is the table read, "database.table"; default QueryLogDefault. On a cluster,
	// Cluster reads it on every replica (clusterAllReplicas), since each node logs its own.
	QueryLog string
	Cluster  string
}

// Cost is one row of the leaderboard: what one hunt's (or set's) statements cost in the
// period, and its read bytes in the period before, for the trend.
type Cost struct {
	Key        string `json:"key"` // hunt id, hunt set, KeyCoordination or KeyNoSet
	Runs       uint64 `json:"runs"`
	Statements uint64 `json:"statements"`
	Failed     uint64 `json:"failed"` // statements that ended in an exception
	ReadRows   uint64 `json:"read_rows"`
	ReadBytes  uint64 `json:"read_bytes"`
	DurationMS uint64 `json:"duration_ms"` // summed over the statements
	PeakMemory uint64 `json:"peak_memory_bytes"`
	// PrevRuns and PrevReadBytes are the same for the period of the same length before.
	PrevRuns      uint64 `json:"previous_runs"`
	PrevReadBytes uint64 `json:"previous_read_bytes"`
}

// ErrQueryLog is wrapped when the query log cannot be read; the message says what to change.
var ErrQueryLog = errors.New("cannot read the query log")

// ErrOptions is wrapped when CostOptions are not valid (a usage error).
var ErrOptions = errors.New("cost")

// ClickHouse error codes the query-log read explains.
const (
	codeUnknownTable    = 60
	codeUnknownDatabase = 81
	codeAccessDenied    = 497
	codeUnknownCluster  = 701
)

// Leaderboard ranks the hunts (or hunt sets) by the bytes their statements read in the period,
// from the query log's finished and failed statements whose log_comment is hunt-runner's
// (Comment). Statements of any kind count: live, backfill, preview, test and estimate under
// their hunt, coordination under KeyCoordination.
func Leaderboard(ctx context.Context, conn driver.Conn, o CostOptions) ([]Cost, error) {
	if o.Since <= 0 {
		return nil, fmt.Errorf("%w: the period must be positive, not %s", ErrOptions, o.Since)
	}
	by := o.By
	if by == "" {
		by = ByHunt
	}
	if by != ByHunt && by != BySet {
		return nil, fmt.Errorf("%w: group by %q: want %s or %s", ErrOptions, by, ByHunt, BySet)
	}
	from, err := queryLogSource(o)
	if err != nil {
		return nil, err
	}
	// The key is computed once, in the inner query; JSONExtractString of a key that is absent is ''.
	q := `SELECT key,
	uniqExactIf(run, cur AND run != ''), countIf(cur), countIf(cur AND type != 'QueryFinish'),
	sumIf(read_rows, cur), sumIf(read_bytes, cur), sumIf(query_duration_ms, cur), maxIf(memory_usage, cur),
	uniqExactIf(run, NOT cur AND run != ''), sumIf(read_bytes, NOT cur)
FROM (
	SELECT event_time >= now() - toIntervalSecond({since:UInt64}) AS cur,
		JSONExtractString(log_comment, 'run_id') AS run,
		JSONExtractString(log_comment, 'kind') AS kind,
		multiIf(kind = 'coordination', {coordination:String},
			{by:String} = 'hunt', JSONExtractString(log_comment, 'hunt_id'),
			JSONExtractString(log_comment, 'hunt_set') = '', {noset:String},
			JSONExtractString(log_comment, 'hunt_set')) AS key,
		type, read_rows, read_bytes, query_duration_ms, toUInt64(greatest(memory_usage, 0)) AS memory_usage
	FROM ` + from + `
	WHERE event_date >= toDate(now() - toIntervalSecond(2 * {since:UInt64}))
		AND event_time >= now() - toIntervalSecond(2 * {since:UInt64})
		AND type != 'QueryStart'
		AND startsWith(log_comment, '{') AND isValidJSON(log_comment)
		AND JSONExtractString(log_comment, 'app') = {app:String}
)
GROUP BY key
HAVING countIf(cur) > 0
ORDER BY sumIf(read_bytes, cur) DESC, key`
	qctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{
		"since": strconv.FormatInt(int64(o.Since/time.Second), 10), "by": by, "app": App,
		"coordination": KeyCoordination, "noset": KeyNoSet,
	}))
	rows, err := conn.Query(qctx, q)
	if err != nil {
		return nil, explainQueryLogError(err, from)
	}
	defer rows.Close()
	var out []Cost
	for rows.Next() {
		var c Cost
		if err := rows.Scan(&c.Key, &c.Runs, &c.Statements, &c.Failed, &c.ReadRows, &c.ReadBytes, &c.DurationMS,
			&c.PeakMemory, &c.PrevRuns, &c.PrevReadBytes); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, explainQueryLogError(err, from)
	}
	return out, nil
}

// queryLogSource is the FROM of the leaderboard: the table, quoted, on every replica of the
// cluster when one is named.
func queryLogSource(o CostOptions) (string, error) {
	name := o.QueryLog
	if name == "" {
		name = QueryLogDefault
	}
	db, table, ok := strings.Cut(name, ".")
	if !ok || db == "" || table == "" || strings.ContainsAny(name, "`\x00") {
		return "", fmt.Errorf("%w: query log table %q: write database.table (default %s)", ErrOptions, name, QueryLogDefault)
	}
	from := schema.QuoteIdent(db) + "." + schema.QuoteIdent(table)
	if o.Cluster != "" {
		from = "clusterAllReplicas(" + schema.QuoteIdent(o.Cluster) + ", " + from + ")"
	}
	return from, nil
}

// explainQueryLogError says what to change when the query log is off or not readable.
func explainQueryLogError(err error, from string) error {
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) {
		return err
	}
	switch ex.Code {
	case codeUnknownTable, codeUnknownDatabase:
		return fmt.Errorf("%w: %s does not exist: the server's query log is off. Turn it on with the <query_log> section "+
			"of the server configuration (it is on by default in clickhouse-server), and keep the setting log_queries=1 "+
			"for the users hunt-runner connects as (the default)", ErrQueryLog, from)
	case codeAccessDenied:
		return fmt.Errorf("%w: this user may not read %s: GRANT SELECT ON system.query_log TO <user> "+
			"(the query log shows every user's statements: give it to operators only)", ErrQueryLog, from)
	case codeUnknownCluster:
		return fmt.Errorf("%w: %s: the server does not know that cluster (see system.clusters)", ErrQueryLog, from)
	}
	return fmt.Errorf("%w: %w", ErrQueryLog, err)
}

// Trend is the change of the bytes read against the period before, as people read it: "+35%", "-20%",
// "new" when nothing was read before, "=" when both are the same.
func (c Cost) Trend() string {
	switch {
	case c.PrevReadBytes == 0 && c.ReadBytes == 0:
		return "="
	case c.PrevReadBytes == 0:
		return "new"
	}
	pct := (float64(c.ReadBytes) - float64(c.PrevReadBytes)) / float64(c.PrevReadBytes) * 100
	if pct > -0.5 && pct < 0.5 {
		return "="
	}
	return fmt.Sprintf("%+.0f%%", pct)
}

// RunCost is what one run's statements cost, from the query log.
type RunCost struct {
	RunID      string    `json:"run_id"`
	Kind       Kind      `json:"kind"`
	Fire       string    `json:"fire"`
	Started    time.Time `json:"started"` // the first statement's event_time
	Statements uint64    `json:"statements"`
	Failed     uint64    `json:"failed"`
	ReadRows   uint64    `json:"read_rows"`
	ReadBytes  uint64    `json:"read_bytes"`
	DurationMS uint64    `json:"duration_ms"`
	PeakMemory uint64    `json:"peak_memory_bytes"`
}

// RunCostsLookback is how far back RunCosts looks for a hunt's runs.
const RunCostsLookback = 7 * 24 * time.Hour

// RunCosts are the newest limit runs of hunt in the query log (o.QueryLog, o.Cluster; o.Since
// defaults to RunCostsLookback), newest first, found by their query_id prefix and comment.
func RunCosts(ctx context.Context, conn driver.Conn, o CostOptions, hunt string, limit int) ([]RunCost, error) {
	from, err := queryLogSource(o)
	if err != nil {
		return nil, err
	}
	since := o.Since
	if since <= 0 {
		since = RunCostsLookback
	}
	q := `SELECT JSONExtractString(log_comment, 'run_id') AS run, any(JSONExtractString(log_comment, 'kind')),
	any(JSONExtractString(log_comment, 'fire')), min(event_time), count(), countIf(type != 'QueryFinish'),
	sum(read_rows), sum(read_bytes), sum(query_duration_ms), max(toUInt64(greatest(memory_usage, 0)))
FROM ` + from + `
WHERE event_date >= toDate(now() - toIntervalSecond({since:UInt64})) AND event_time >= now() - toIntervalSecond({since:UInt64})
	AND type != 'QueryStart' AND startsWith(query_id, {prefix:String})
	AND isValidJSON(log_comment) AND JSONExtractString(log_comment, 'app') = {app:String}
	AND JSONExtractString(log_comment, 'hunt_id') = {hunt:String} AND run != ''
GROUP BY run
ORDER BY min(event_time) DESC, run
LIMIT {limit:UInt32}`
	qctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{
		"since": strconv.FormatInt(int64(since/time.Second), 10), "prefix": QueryIDPrefix, "app": App,
		"hunt": hunt, "limit": strconv.Itoa(max(limit, 1)),
	}))
	rows, err := conn.Query(qctx, q)
	if err != nil {
		return nil, explainQueryLogError(err, from)
	}
	defer rows.Close()
	var out []RunCost
	for rows.Next() {
		var r RunCost
		var kind string
		if err := rows.Scan(&r.RunID, &kind, &r.Fire, &r.Started, &r.Statements, &r.Failed, &r.ReadRows, &r.ReadBytes,
			&r.DurationMS, &r.PeakMemory); err != nil {
			return nil, err
		}
		r.Kind = Kind(kind)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, explainQueryLogError(err, from)
	}
	return out, nil
}
