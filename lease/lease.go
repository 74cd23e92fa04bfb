package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
)

// Fire identifies one scheduled (or requested) run of a hunt. Fire is epoch seconds.
type Fire struct {
	HuntID string
	Fire   int64
}

// Lease is a won claim. ClaimID fences every later write.
type Lease struct {
	HuntID  string
	Fire    int64
	Owner   string
	ClaimID uuid.UUID
	Claimed time.Time // server clock of the newest row (the claim or the latest renewal)
	Until   time.Time // server clock
	// Trusted is a process-clock deadline: past it, without a successful Renew, the holder
	// must stop writing. It is the send of the write whose read-back produced this Lease plus
	// the row's remaining life as that read saw it (at most Lease), minus Settle, so neither a
	// slow answer nor a row written by an earlier attempt stretches trust past Until.
	Trusted time.Time
	// Watermark is the hunt's newest watermark as the verify read saw it, after this claim's
	// row was the newest (HasWatermark false: the hunt never committed). The run's window
	// starts there, and its commit is a compare-and-set against it, so a run never covers a
	// range another commit already covered.
	Watermark    int64
	HasWatermark bool
	// WatermarkInterval is the hunt's interval in seconds when that watermark was committed (0:
	// unknown). The run caps its catch-up with it, so shortening an interval does not turn the
	// rest of the old interval into a gap.
	WatermarkInterval int64
}

// Outcome is how one fire of a Claim batch ended; runner uses it as a metric label.
type Outcome string

const (
	OutcomeWon        Outcome = "won"
	OutcomeLost       Outcome = "lost"
	OutcomeAlreadyRun Outcome = "already_run"
	OutcomeError      Outcome = "error"
)

// Result sorts every fire passed to Claim into exactly one bucket.
type Result struct {
	Won        []Lease
	Lost       []Fire
	AlreadyRun []Fire
	Failed     []Fire
	Err        error // why Failed is non-empty
	// OverCap counts the fires of Lost that were won but over Cap.Max (ClaimCapped): released
	// without running, so the fire stays due.
	OverCap int
	// InsertTook is the longest send → acknowledgement of the batch's claim inserts (0: none
	// was sent). A claim acknowledged Settle or more after it was sent is Lost, so this is what
	// an operator compares with --settle (hunt_runner_claim_insert_duration).
	InsertTook time.Duration
}

var (
	// ErrLost means the lease is no longer ours: a peer's row is newest, or ours expired.
	ErrLost = errors.New("lease: lost")
	// ErrFenced means a fenced write was refused because the writer no longer holds the lease.
	ErrFenced = errors.New("lease: fenced")
)

// Defaults for Options.
const (
	DefaultLease  = 5 * time.Minute
	DefaultSettle = 750 * time.Millisecond
)

// Options configures a Coordinator.
type Options struct {
	// Owner names this claimer in lease rows (pod name plus pid is a good choice). Required.
	Owner string
	// Lease is how long a won claim lives before it must be renewed. Default 5m; at least 4×Settle.
	Lease time.Duration
	// Settle is the single wait between the batch insert and the verify read. Default 750ms.
	// The protocol tolerates replica visibility lag below Settle/2 (see the package comment).
	Settle time.Duration
	// Provisional is how long a claim row holds its hunt until the winner extends it to Lease,
	// right after its verify read. A claim whose insert was acknowledged too late to count
	// (see the package comment) is never extended, so it blocks its hunt for Provisional, not
	// for a whole Lease. Default 10 × Settle; at least 5 × Settle (the free read, insert,
	// settle, verify and extension must be acknowledged a settle before it runs out), at most
	// Lease (the default when Lease is under 10 × Settle: no provisional phase).
	Provisional time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Settle == 0 {
		o.Settle = DefaultSettle
	}
	if o.Provisional == 0 {
		o.Provisional = 10 * o.Settle
		if o.Provisional >= o.Lease {
			o.Provisional = o.Lease // too short a lease for a provisional phase: claim it whole
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Validate reports the first problem with already-defaulted options.
func (o Options) validate() error {
	switch {
	case o.Owner == "":
		return errors.New("lease: owner must not be empty")
	case o.Settle <= 0:
		return fmt.Errorf("lease: settle must be positive, got %s", o.Settle)
	case o.Lease < 4*o.Settle:
		return fmt.Errorf("lease: lease %s must be at least 4× settle %s", o.Lease, o.Settle)
	case o.Provisional > o.Lease || (o.Provisional < o.Lease && o.Provisional < 5*o.Settle):
		return fmt.Errorf("lease: provisional lease %s must be at least 5× settle (%s) and at most the lease %s", o.Provisional, 5*o.Settle, o.Lease)
	}
	return nil
}

// Coordinator runs the claim protocol over a Store. It is safe for concurrent use by multiple
// goroutines, as database/sql.DB is: it holds no per-call state, and the runner claims, renews
// and releases from its tick and its jobs at once. Correctness between calls, in this process
// or another, comes from the protocol's server-side checks, never from the Coordinator.
type Coordinator struct {
	opts  Options
	proto *protocol
}

// New validates opts (after applying defaults) and returns a Coordinator over st (store.Store's
// Leases in production; the simulation's in-memory store in tests).
func New(st Store, opts Options) (*Coordinator, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if st == nil {
		return nil, errors.New("lease: nil store")
	}
	return &Coordinator{opts: opts, proto: newProtocol(st, opts)}, nil
}

// Options returns the effective (defaulted) options.
func (c *Coordinator) Options() Options { return c.opts }

// Claim claims a batch in a constant number of round trips: free read, one conditional
// INSERT … SELECT for all, one settle, one verify read (which re-checks watermarks too), and
// one fenced extension of the winners with its read-back.
func (c *Coordinator) Claim(ctx context.Context, fires []Fire) (Result, error) {
	return c.proto.claim(ctx, fires)
}

// Cap bounds the leases live at once across every claimer of a scope (`run --cap`).
type Cap struct {
	// Max is the most live leases the scope may hold at any instant; 0: no cap.
	Max int
	// Hunts is the scope: these hunts and their backfill keys (Store.Running). Every claimer
	// of the scope must claim with the same Max and the same Hunts for the bound to hold.
	Hunts []string
}

// ClaimCapped is Claim under a cap: after the verify, one more read (Store.Running) counts the
// live leases of the scope that are not this batch's winners, and the winners beyond Max
// minus that count, in fires' order, are released without running (Lost; Result.OverCap).
// docs/claim-protocol.md ("The cap on runs in flight") derives the bound.
func (c *Coordinator) ClaimCapped(ctx context.Context, fires []Fire, cp Cap) (Result, error) {
	return c.proto.claimCapped(ctx, fires, cp)
}

// Renew extends l by Options.Lease if it is still the newest row for its hunt and live.
// It returns ErrLost when it is not.
func (c *Coordinator) Renew(ctx context.Context, l Lease) (Lease, error) {
	return c.proto.renew(ctx, l)
}

// Release ends l now, fenced on its claim id: nothing is written unless l is still the newest
// row of its hunt and live (an expired lease already frees the hunt, and a release row could
// land over a peer's claim of it).
func (c *Coordinator) Release(ctx context.Context, l Lease) error {
	if err := c.proto.store.Release(ctx, []Lease{l}); err != nil {
		return fmt.Errorf("lease: release %s: %w", l.HuntID, err)
	}
	return nil
}
