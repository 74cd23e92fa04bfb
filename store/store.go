// Package store is the only package that speaks SQL to hunt-runner's own tables. Each table
// family has its file: leases.go (hunt_lease: the claim protocol's lease.Store), commits.go
// (hunt_watermark: the compare-and-set commit), runs.go (hunt_run and run-now requests),
// state.go (hunt_state), snapshot.go (the reads a tick plans from), control.go (pause,
// backfill), heartbeat.go, import.go; newest.go holds the one "newest row" form of each
// table. Table names come from chstore's constants; write settings, deduplication tokens and
// key encodings are set here, once per write.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode/utf8"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/lease"
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
	return chstore.QuoteIdent(s.database) + "." + chstore.QuoteIdent(name)
}

// insertCtx sets what every coordination insert carries: synchronous, explicit join defaults,
// and a deduplication
// token derived from the row's content, so a retry routed to another replica after a lost
// answer is dropped by the block deduplication (an identical later write is dropped too, which
// changes nothing).
func insertCtx(ctx context.Context, parts ...any) context.Context {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%v\x00", p)
	}
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"async_insert": 0, "insert_deduplication_token": hex.EncodeToString(h.Sum(nil)[:16]),
		"join_use_nulls": 0})) // a hunt without a previous row reads zeros
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
