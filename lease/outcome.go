package lease

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// What a failed statement says about whether it was applied. Any ClickHouse write may land
// and still answer an error, or answer late; only a few answers say it did not run at all.
//
//   - Refused: the server turned the statement away before executing it, nothing was
//     written, and a retry is what it asks for (a quorum insert still pending, too many parts,
//     a read-only replica, too many queries). Retry after a jittered wait.
//   - Unknown: the statement may have been applied, may still be running, or failed on the
//     way (a quorum timeout after the local write, a lost connection, Keeper trouble, a read
//     that a replica could not serve consistently). Read back by the write's own id before
//     deciding; a retry is safe only for writes that a read-back or a fence makes idempotent.
//   - anything else is a definite answer about the statement as written (a syntax error, an
//     unknown table, a denied grant): retrying changes nothing.
//
// The lists name what is allowed to be retried; a code not on them is final.
var (
	refusedCodes = map[int32]string{
		202: "TOO_MANY_SIMULTANEOUS_QUERIES",
		203: "NO_FREE_CONNECTION",
		242: "TABLE_IS_READ_ONLY",
		252: "TOO_MANY_PARTS",
		285: "TOO_FEW_LIVE_REPLICAS", // checked before anything is written locally
		286: "UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE",
	}
	unknownCodes = map[int32]string{
		3:   "UNEXPECTED_END_OF_FILE",
		32:  "ATTEMPT_TO_READ_AFTER_EOF",
		95:  "CANNOT_READ_FROM_SOCKET",
		96:  "CANNOT_WRITE_TO_SOCKET",
		159: "TIMEOUT_EXCEEDED",
		209: "SOCKET_TIMEOUT",
		210: "NETWORK_ERROR",
		225: "NO_ZOOKEEPER",
		241: "MEMORY_LIMIT_EXCEEDED",
		244: "UNEXPECTED_ZOOKEEPER_ERROR",
		289: "REPLICA_IS_NOT_IN_QUORUM", // a sequentially consistent read on a replica behind the quorum
		319: "UNKNOWN_STATUS_OF_INSERT", // a quorum insert that timed out after writing locally
		369: "ALL_REPLICAS_ARE_STALE",
		394: "QUERY_WAS_CANCELLED",
		999: "KEEPER_EXCEPTION",
	}
)

// Refused reports whether err is the server refusing a statement it did not execute: nothing
// was written, and the same statement may be sent again.
func Refused(err error) bool {
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) {
		return false
	}
	_, ok := refusedCodes[ex.Code]
	return ok
}

// Transient reports whether a retry may succeed: a refusal, an answer that leaves the outcome
// unknown, or no answer at all (a network error, a broken connection, the attempt's own
// deadline). The caller of a
// write that failed transiently must treat it as possibly applied (read it back by its id)
// unless Refused says otherwise. Cancellation of ctx (shutdown) is not transient.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, ErrLost) || errors.Is(err, ErrFenced) {
		return false
	}
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) {
		return noAnswer(err)
	}
	if _, ok := refusedCodes[ex.Code]; ok {
		return true
	}
	_, ok := unknownCodes[ex.Code]
	return ok
}

// noAnswer reports whether err says the server's answer never arrived: the network failed,
// the connection broke, or the attempt's own deadline passed.
func noAnswer(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrBadConn)
}

// Jitter is a wait in [d/2, d): retries of writers refused together (several pods' quorum
// inserts into one table) spread out instead of colliding again.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// Sleep waits d or until ctx ends, and reports whether the wait completed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
