package notify

import (
	"context"
	"errors"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Counts are the deliveries by newest status.
type Counts struct {
	Pending    uint64 `json:"pending"` // pending, delivering or retry
	Delivered  uint64 `json:"delivered"`
	Dead       uint64 `json:"dead"`
	Suppressed uint64 `json:"suppressed"`
	Muted      uint64 `json:"muted"` // due while muted (time interval or snooze); never sent
}

func counts(ctx context.Context, st deliveryStore, since int64) (Counts, error) {
	var c Counts
	err := st.conn.QueryRow(ctx, `SELECT countIf(status IN ('pending', 'delivering', 'retry')), countIf(status = 'delivered'),
       countIf(status = 'dead'), countIf(status = 'suppressed'), countIf(status = 'muted')
FROM (`+st.newestSQL("fire >= toDateTime({since:Int64}, 'UTC')")+`)`, clickhouse.Named("since", since)).
		Scan(&c.Pending, &c.Delivered, &c.Dead, &c.Suppressed, &c.Muted)
	return c, err
}

// Delivery is the newest state of one (hunt, fire, sink).
type Delivery struct {
	HuntID         string    `json:"hunt_id"`
	Fire           time.Time `json:"fire"`
	Sink           string    `json:"sink"`
	Status         string    `json:"status"`
	Attempts       uint32    `json:"attempts"`
	LastError      string    `json:"last_error,omitempty"`
	NextAttempt    time.Time `json:"next_attempt"`
	Owner          string    `json:"owner"`
	IdempotencyKey string    `json:"idempotency_key"`
	Delivered      time.Time `json:"delivered"`
}

// StatusReport is `hunt-runner notify status`.
type StatusReport struct {
	Now        time.Time  `json:"now"`
	Counts     Counts     `json:"counts"`
	Deliveries []Delivery `json:"deliveries"` // every delivery not delivered or suppressed (muted ones too), newest fire first
}

// Status reads the delivery table: counts over fires since since, and every delivery that is
// not final-and-fine (pending, delivering, retry, dead, muted: last_error says what muted it).
func Status(ctx context.Context, conn driver.Conn, database string, since time.Time) (StatusReport, error) {
	st := deliveryStore{conn: conn, db: database}
	var rep StatusReport
	c, err := counts(ctx, st, since.Unix())
	if err != nil {
		return rep, err
	}
	rep.Counts = c
	if err := conn.QueryRow(ctx, "SELECT now64(3)").Scan(&rep.Now); err != nil {
		return rep, err
	}
	rows, err := conn.Query(ctx, `SELECT hunt_id, fire, sink, status, attempts, last_error, next_attempt, owner, idempotency_key, delivered
FROM (`+st.newestSQL("fire >= toDateTime({since:Int64}, 'UTC')")+`)
WHERE status NOT IN ('delivered', 'suppressed')
ORDER BY fire DESC, hunt_id, sink LIMIT 1000`, clickhouse.Named("since", since.Unix()))
	if err != nil {
		return rep, err
	}
	defer rows.Close()
	rep.Deliveries = []Delivery{}
	for rows.Next() {
		var d Delivery
		if err := rows.Scan(&d.HuntID, &d.Fire, &d.Sink, &d.Status, &d.Attempts, &d.LastError, &d.NextAttempt, &d.Owner, &d.IdempotencyKey, &d.Delivered); err != nil {
			return rep, err
		}
		rep.Deliveries = append(rep.Deliveries, d)
	}
	return rep, rows.Err()
}

// RetryFilter selects dead letters to re-queue; empty fields match everything.
type RetryFilter struct {
	HuntID string
	Sink   string
	Fire   time.Time // zero: any fire
	Since  time.Time // only fires at or after
}

// Retry re-queues the matching dead letters: a pending row with the same idempotency key, due
// now, whose retry horizon starts again. It returns how many it re-queued.
func Retry(ctx context.Context, conn driver.Conn, database, owner string, f RetryFilter) (int, error) {
	if owner == "" {
		return 0, errors.New("notify: retry needs an owner")
	}
	st := deliveryStore{conn: conn, db: database}
	where := `fire >= toDateTime({since:Int64}, 'UTC')`
	args := []any{clickhouse.Named("since", f.Since.Unix()), clickhouse.Named("owner", owner)}
	if f.HuntID != "" {
		where += ` AND hunt_id = {h:String}`
		args = append(args, clickhouse.Named("h", f.HuntID))
	}
	if f.Sink != "" {
		where += ` AND sink = {s:String}`
		args = append(args, clickhouse.Named("s", f.Sink))
	}
	if !f.Fire.IsZero() {
		where += ` AND fire = toDateTime({f:Int64}, 'UTC')`
		args = append(args, clickhouse.Named("f", f.Fire.Unix()))
	}
	var n uint64
	if err := conn.QueryRow(ctx, `SELECT count() FROM (`+st.newestSQL(where)+`) WHERE status = 'dead'`, args...).Scan(&n); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	// The status check runs on the server as the rows are written: a delivery a peer re-queued
	// and claimed meanwhile is not dead any more and is left alone.
	q := `INSERT INTO ` + st.table(schema.TableDelivery) + ` (` + deliveryCols + `)
SELECT hunt_id, fire, sink, run_id, idempotency_key, 'pending', attempts, concat('re-queued after: ', last_error), now64(3),
       now64(6), delivered, toUUID('` + nilUUID + `'), {owner:String}, toDateTime64(0, 3, 'UTC'), now64(6)
FROM (` + st.newestSQL(where) + `)
WHERE status = 'dead'`
	if err := conn.Exec(writeCtx(ctx), q, args...); err != nil {
		return 0, err
	}
	return int(n), nil
}
