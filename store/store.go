// Package store is the only package that speaks SQL to hunt-runner's own tables
// (store/boundary_test.go enforces it). Each table family has its file: leases.go (hunt_lease:
// the claim protocol's lease.Store), commits.go (hunt_watermark: the compare-and-set commit),
// runs.go (hunt_run and run-now requests), state.go (hunt_state), snapshot.go (the reads a tick
// plans from), control.go (pause, backfill), schedule.go (hunt_schedule and hunt_publish:
// schedule.Materialise's port), due.go (the due backlog in SQL, schedule.IsDue's twin),
// backlog.go (the KEDA backlog view built on it),
// deliveries.go and suppress.go (notification deliveries and suppression), snooze.go,
// findings.go (hunt_findings), status.go (the status report's reads), ownership.go (who
// publishes a hunt), checked.go (the server check's cache), heartbeat.go, import.go
// (import-legacy); newest.go holds the one "newest row" form of each table. The tables
// themselves (names, DDL, upgrades, retention, grants) are defined in the leaf package
// store/schema. Write settings, deduplication tokens and key encodings are set here, once per
// write.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// ErrFenced is lease.ErrFenced: the writer no longer holds the lease.
var ErrFenced = lease.ErrFenced

// Store reads and writes hunt-runner's own tables in one database. It is safe for concurrent
// use by multiple goroutines, as database/sql.DB is: it holds only the connection (itself a
// pool) and the database name, and no call carries state to the next. Ordering between writers,
// in this process or in other pods, is never the Store's: each write carries its own fence (a
// claim id, the watermark's compare-and-set, a fire), checked on the server when the statement
// runs, and each write's outcome is settled by reading it back by its own id.
type Store struct {
	conn     driver.Conn
	database string
}

// New returns a Store over database (default "hunt_runner" when empty).
func New(conn driver.Conn, database string) *Store {
	if database == "" {
		database = chstore.DefaultDatabase
	}
	return &Store{conn: conn, database: database}
}

func (s *Store) table(name string) string {
	return schema.QuoteIdent(s.database) + "." + schema.QuoteIdent(name)
}

// writeCtx carries the settings of every write to hunt-runner's tables, the one place they are
// chosen: synchronous (an async insert is invisible until flushed and its errors are lost),
// explicit about join defaults, which the fences rely on (an unmatched LEFT JOIN row reads as
// epoch 0: no lease, no watermark), the write's deduplication token, and its server-side
// execution bound when it has one (withExecutionBound).
func writeCtx(ctx context.Context, token string) context.Context {
	s := clickhouse.Settings{
		"async_insert":   0,
		"join_use_nulls": 0,
	}
	if d, ok := ctx.Value(executionBoundKey{}).(time.Duration); ok && d > 0 {
		s["max_execution_time"] = d.Seconds()
	}
	if token != "" {
		// Replicated tables drop an insert whose block hash they have seen; a token unique
		// to this attempt keeps a new attempt from being mistaken for an old one, while a
		// client retry of the same attempt stays idempotent.
		s["insert_deduplication_token"] = token
	}
	return clickhouse.Context(ctx, clickhouse.WithSettings(s))
}

// withExecutionBound makes the server abort the statement once it has run for d
// (max_execution_time): what the caller derives from when the statement's rows can land
// holds on the server, not only while the client waits.
func withExecutionBound(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, executionBoundKey{}, d)
}

type executionBoundKey struct{}

// insertCtx is writeCtx with a token derived from the row's content (contentToken).
func insertCtx(ctx context.Context, parts ...any) context.Context {
	return writeCtx(ctx, contentToken(parts...))
}

// contentToken is a deduplication token derived from a row's content, so a retry routed to
// another replica after a lost answer is dropped by the block deduplication (an identical later
// write is dropped too, which changes nothing).
func contentToken(parts ...any) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%v\x00", p)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// MaxErrorBytes bounds the error text stored with a run or a hunt's state. Errors can quote a
// whole hunt query (a syntax error does), and statement parameters travel in the request URL,
// which ClickHouse caps (http_max_uri_size, 1 MiB by default).
const MaxErrorBytes = 4096

// boundError cuts s to MaxErrorBytes on a UTF-8 boundary, marking the cut.
func boundError(s string) string {
	if len(s) <= MaxErrorBytes {
		return s
	}
	const mark = "… (cut)"
	cut := MaxErrorBytes - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
