package store

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// State is what a finished run writes to hunt_state. Its counters are not taken from the
// writer's snapshot but derived on the server from the hunt's newest row when the statement
// runs, so two pods cannot lose or reverse each other's increments, and a write for an older
// fire never lands over a newer one (SetStates).
type State struct {
	HuntID    string
	Status    hunt.RunStatus // hunt.RunFailed counts one more consecutive failure; any other resets them
	LastError string
	LastFire  int64 // the fire the run was for: the write is fenced on it
	// TooAggressive marks a hunt whose run took longer than its interval.
	TooAggressive bool
	// A failure backs the hunt off: the n-th consecutive failure (n as derived) sets retry_after
	// to the server's now plus min(BackoffBase × 2^(n−1), BackoffCap) (0: no backoff).
	BackoffBase, BackoffCap time.Duration
	// Hold sets retry_after to the server's now plus Hold for a run that did not fail but must
	// not be retried at once (over_budget: until the hunt's next fire). 0: no hold.
	Hold time.Duration
}

// SetState writes a hunt_state row (updated = server clock).
func (s *Store) SetState(ctx context.Context, st State) error { return s.SetStates(ctx, []State{st}) }

// statesPerInsert bounds the error text of the hunt_state rows one insert carries: its
// parameters travel in the URL, escaped (a quote can take six bytes there), and ClickHouse caps
// the URL at 1 MiB by default.
const statesPerInsert = 32 << 10

// SetStates writes hunt_state rows (updated = the server's clock, the same for every row of an
// insert), in one insert unless their error text is long: then in as few as keep each insert's
// URL well under the server's cap.
func (s *Store) SetStates(ctx context.Context, sts []State) error {
	for len(sts) > 0 {
		n, size := 1, min(len(sts[0].LastError), MaxErrorBytes) // as stored: boundError
		for n < len(sts) && size+min(len(sts[n].LastError), MaxErrorBytes) <= statesPerInsert {
			size += min(len(sts[n].LastError), MaxErrorBytes)
			n++
		}
		if err := s.setStates(ctx, sts[:n]); err != nil {
			return err
		}
		sts = sts[n:]
	}
	return nil
}

// setStates writes hunt_state rows in one insert. The rows travel as array parameters; the
// deduplication token covers them all. Each row is derived from the hunt's newest row (by
// updated) as the statement runs:
//
//   - written only if that row's last_fire is not above the new one, and no commit of a later
//     fire exists: a late write for an older fire (a held statement, a slow pod) never undoes
//     a newer fire's failure or backoff, nor marks failing a hunt whose newer fire committed
//     (a healthy hunt has no row to fence on: the runner writes none for its successes);
//   - consecutive_failures is the previous count plus one for a failure, 0 otherwise;
//   - overrun_count is carried from the previous row (overruns are counted on the commit
//     rows since, Store.Overruns; what it holds came from an import or an earlier release);
//   - retry_after follows from the derived failure count.
//
// One join to the newest state rows serves every derived column.
//
// A failure written again after a lost answer counts twice (one backoff step more); nothing
// can count less.
func (s *Store) setStates(ctx context.Context, sts []State) error {
	var (
		ids, statuses, errs = make([]string, len(sts)), make([]string, len(sts)), make([]string, len(sts))
		fires, bases, caps  = make([]int64, len(sts)), make([]int64, len(sts)), make([]int64, len(sts))
		holds               = make([]int64, len(sts))
		aggressive          = make([]bool, len(sts))
		token               = []any{"state"}
	)
	for i, st := range sts {
		ids[i], statuses[i], errs[i] = st.HuntID, st.Status.String(), boundError(st.LastError)
		fires[i], bases[i], caps[i] = st.LastFire, st.BackoffBase.Milliseconds(), st.BackoffCap.Milliseconds()
		aggressive[i], holds[i] = st.TooAggressive, st.Hold.Milliseconds()
		token = append(token, st.HuntID, st.Status, st.LastError, st.LastFire, st.TooAggressive,
			st.BackoffBase, st.BackoffCap)
		if st.Hold > 0 { // only then: the tokens of rows without a hold stay as they were
			token = append(token, st.Hold)
		}
	}
	q := `INSERT INTO ` + s.table(schema.TableState) + ` (hunt_id, status, consecutive_failures, last_error, last_fire, updated,
    retry_after, overrun_count, too_aggressive)
SELECT b.h, b.status, b.failures, b.err, toDateTime(b.fire, 'UTC'), now64(6),
    if(b.failures > 0 AND b.base > 0,
       now64(3) + toIntervalMillisecond(least(toUInt64(b.base) * bitShiftLeft(toUInt64(1), least(greatest(b.failures, 1) - 1, 40)), toUInt64(b.cap))),
       if(b.hold > 0, now64(3) + toIntervalMillisecond(b.hold), toDateTime64(0, 3, 'UTC'))),
    b.overruns, b.aggressive
FROM (SELECT r.1 AS h, r.2 AS status, r.3 AS err, r.4 AS fire, r.5 AS base, r.6 AS cap, r.7 AS aggressive, r.8 AS hold,
             if(r.2 = '` + hunt.RunFailed.String() + `', toUInt32(p.consecutive_failures + 1), toUInt32(0)) AS failures,
             toUInt64(p.overrun_count) AS overruns, toInt64(p.last_fire) AS prev_fire
      FROM (SELECT arrayJoin(arrayZip({h:Array(String)}, {status:Array(String)}, {err:Array(String)}, {fire:Array(Int64)},
                {base_ms:Array(Int64)}, {cap_ms:Array(Int64)}, {aggressive:Array(Bool)}, {hold_ms:Array(Int64)})) AS r) AS z
      LEFT JOIN (` + newestStateSQL(s.database, "h") + `) AS p ON p.hunt_id = z.r.1) AS b
LEFT JOIN (` + newestWatermarkSQL(s.database, "h") + `) AS w ON w.hunt_id = b.h
WHERE b.prev_fire <= b.fire AND toInt64(w.watermark) <= b.fire`
	args := []any{clickhouse.Named("h", ids), clickhouse.Named("status", statuses), clickhouse.Named("err", errs),
		clickhouse.Named("fire", fires), clickhouse.Named("base_ms", bases), clickhouse.Named("cap_ms", caps),
		clickhouse.Named("aggressive", aggressive), clickhouse.Named("hold_ms", holds)}
	if err := s.conn.Exec(insertCtx(ctx, token...), q, args...); err != nil {
		if len(sts) == 1 {
			return fmt.Errorf("watermark: set state %s: %w", sts[0].HuntID, err)
		}
		return fmt.Errorf("watermark: set state of %d hunts: %w", len(sts), err)
	}
	return nil
}
