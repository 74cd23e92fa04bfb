package notify

import (
	"context"
	"errors"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/store"
)

// Counts are the deliveries by newest status.
type Counts = store.DeliveryCounts

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
	st := store.New(conn, database)
	var rep StatusReport
	c, err := st.CountDeliveries(ctx, since.Unix())
	if err != nil {
		return rep, err
	}
	rep.Counts = c
	open, now, err := st.OpenDeliveries(ctx, since.Unix())
	if err != nil {
		return rep, err
	}
	rep.Now = now
	rep.Deliveries = make([]Delivery, len(open))
	for i, d := range open {
		rep.Deliveries[i] = Delivery{HuntID: d.HuntID, Fire: time.Unix(d.Fire, 0).UTC(), Sink: d.Sink, Status: d.Status,
			Attempts: d.Attempts, LastError: d.LastError, NextAttempt: d.NextAttempt, Owner: d.Owner,
			IdempotencyKey: d.IdempotencyKey, Delivered: d.Delivered}
	}
	return rep, nil
}

// RetryFilter selects dead letters to re-queue; empty fields match everything.
type RetryFilter = store.DeadFilter

// Retry re-queues the matching dead letters: a pending row with the same idempotency key, due
// now, whose retry horizon starts again. It returns how many it re-queued.
func Retry(ctx context.Context, conn driver.Conn, database, owner string, f RetryFilter) (int, error) {
	if owner == "" {
		return 0, errors.New("notify: retry needs an owner")
	}
	return store.New(conn, database).RequeueDead(ctx, f, owner)
}
