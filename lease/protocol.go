package lease

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
)

// Row is one hunt_lease row as a reader sees it.
type Row struct {
	HuntID  string
	Fire    int64
	Owner   string
	ClaimID uuid.UUID
	Claimed time.Time
	Until   time.Time
}

// Newer reports whether a orders after b by (claimed, claim_id): the order every reader
// uses to pick the newest lease row of a hunt, so all readers that see the same rows agree.
// The claim_id half only holds until a merge (which keeps the last inserted of rows with equal
// claimed), so the claim protocol never lets it decide a winner: a tie on claimed at the top
// is lost for both claims (View.Tied).
func Newer(a, b Row) bool {
	if !a.Claimed.Equal(b.Claimed) {
		return a.Claimed.After(b.Claimed)
	}
	return uuidLess(b.ClaimID, a.ClaimID)
}

// uuidLess orders UUIDs the way ClickHouse compares UUID values: the last 8 bytes of the
// canonical form first, then the first 8 (TestNewerMatchesEngineUUIDOrder checks it).
func uuidLess(a, b uuid.UUID) bool {
	for _, i := range [...]int{8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7} {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// View is what one read of the store saw.
type View struct {
	Now        time.Time        // the store's clock when it read
	Leases     map[string]Row   // newest lease row per hunt; absent = never leased
	Watermarks map[string]int64 // newest watermark per hunt; absent = never run
	// WatermarkIntervals is the hunt's interval (seconds) when its newest watermark was
	// committed; absent = unknown (a row from before layout 3, or a store that does not keep it).
	WatermarkIntervals map[string]int64
	// Tied holds the hunts whose newest claimed is shared by a row of another claim id. The
	// claim_id tie-break is only what readers agree on until a merge: ReplacingMergeTree
	// (claimed) keeps the last inserted of tied rows, whatever its claim id, so a verify
	// treats a tie as lost for every claimer in it (see Newer).
	Tied map[string]bool
}

// Store is what the claim protocol needs from the database: the port it runs over. The
// ClickHouse implementation is store.Leases; the simulation tests drive the same protocol
// through an in-memory Store with replica lag. Every method is one round trip per
// MaxStatement hunts, and may be called from several goroutines at once.
type Store interface {
	// Read returns the store clock and the newest lease row and watermark of each hunt.
	Read(ctx context.Context, hunts []string) (View, error)
	// InsertClaims writes, in one conditional statement, a row for each claim whose hunt the
	// store still sees as free when the statement runs: no live lease (newest lease_until <=
	// now, or spent: its fire <= watermark), watermark < fire, and not paused. The store sets
	// Claimed (its clock, or just above the newest row's when that is ahead) and Until (its
	// clock + lease).
	InsertClaims(ctx context.Context, claims []Row, lease time.Duration) error
	// Release writes, for each lease whose row is still the newest of its hunt, a row with the
	// same claim id ending it now. Leases that are no longer newest are left alone.
	Release(ctx context.Context, leases []Lease) error
	// Extend writes, for each lease whose row is still the newest of its hunt and lives more
	// than margin past the store's now, a row with the same claim id lasting lease from the
	// store's now. Others are left alone. The statement must not outlive margin/2 (its rows land
	// while the row they extend still has margin/2 to run).
	Extend(ctx context.Context, leases []Lease, lease, margin time.Duration) error
	// Renew writes, if l's row is still the newest of its hunt and live, a row with the same
	// claim id lasting lease from the store's now; otherwise nothing. A retry of the same
	// renewal (same l) must not write a second row. The protocol reads back to decide.
	Renew(ctx context.Context, l Lease, lease time.Duration) error
	// Running returns the newest lease row of every key of hunts (each hunt, and each of its
	// backfill keys; never a delivery key) that is live on the store's clock and not spent
	// (its fire above the key's watermark): the leases a cap counts (Cap).
	Running(ctx context.Context, hunts []string) ([]Row, error)
}

// MaxStatement caps the hunts bound into one statement. Parameters travel in the URL over
// HTTP, and servers cap its size (http_max_uri_size, 1 MiB by default): 2,000 hunts with
// long ids and their claim ids stay well under it. A larger batch costs its round trips once
// per 2,000 hunts; the protocol still waits one settle.
const MaxStatement = 2000

func chunks[T any](all []T) [][]T {
	var out [][]T
	for len(all) > MaxStatement {
		out = append(out, all[:MaxStatement])
		all = all[MaxStatement:]
	}
	return append(out, all)
}

// protocol is the claim protocol over any Store. Time is the process clock (time.Now and
// timers) only for measuring this claimer's own round trips and waiting the settle; every
// lease comparison uses the store's clock.
type protocol struct {
	store       Store
	owner       string
	lease       time.Duration
	provisional time.Duration
	settle      time.Duration
	log         *slog.Logger
	newID       func() uuid.UUID
	jitter      func(time.Duration) time.Duration // Jitter; the simulation's draws from its seed
}

func newProtocol(st Store, o Options) *protocol {
	return &protocol{store: st, owner: o.Owner, lease: o.Lease, provisional: o.Provisional, settle: o.Settle,
		log: o.Logger, newID: uuid.New, jitter: Jitter}
}

// claim runs one batch: free read, one conditional insert, one settle, one verify read (which
// carries the watermark re-check), and one fenced extension of the winners with its read-back.
func (p *protocol) claim(ctx context.Context, fires []Fire) (Result, error) {
	return p.claimCapped(ctx, fires, Cap{})
}

// claimCapped is claim with the winners held to cp (capped) before they are extended.
func (p *protocol) claimCapped(ctx context.Context, fires []Fire, cp Cap) (Result, error) {
	var res Result
	batch := oneFirePerHunt(fires, &res)
	if len(batch) == 0 {
		return res, nil
	}
	freeRead := time.Now()
	free, err := p.store.Read(ctx, huntIDs(batch))
	if err != nil {
		return p.fail(res, batch, fmt.Errorf("lease: free read: %w", err))
	}
	claims := p.candidates(batch, free, &res)
	if len(claims) == 0 {
		return res, nil
	}
	landed := p.insert(ctx, claims, &res)
	if len(landed) == 0 {
		return p.result(res)
	}
	t := time.NewTimer(p.settle)
	select {
	case <-ctx.Done():
		t.Stop()
		return p.fail(res, rowFires(landed), fmt.Errorf("lease: settle: %w", ctx.Err()))
	case <-t.C:
	}
	verify, err := p.store.Read(ctx, rowIDs(landed))
	if err != nil {
		return p.fail(res, rowFires(landed), fmt.Errorf("lease: verify read: %w", err))
	}
	p.winners(ctx, landed, verify, freeRead, &res)
	if cp.Max > 0 && len(res.Won) > 0 {
		p.capped(ctx, cp, &res)
	}
	if len(res.Won) > 0 {
		var lost []Fire
		res.Won, lost = p.extend(ctx, res.Won, freeRead)
		res.Lost = append(res.Lost, lost...)
	}
	p.log.DebugContext(ctx, "claim batch", "fires", len(fires), "won", len(res.Won), "lost", len(res.Lost),
		"already_run", len(res.AlreadyRun), "took", time.Since(freeRead))
	return p.result(res)
}

// oneFirePerHunt keeps the first fire of each hunt: one lease row per hunt means a second fire
// of the same hunt cannot be held at the same time, so it is Lost and waits for a later tick.
func oneFirePerHunt(fires []Fire, res *Result) []Fire {
	batch := make([]Fire, 0, len(fires))
	seen := make(map[string]bool, len(fires))
	for _, f := range fires {
		if seen[f.HuntID] {
			res.Lost = append(res.Lost, f)
			continue
		}
		seen[f.HuntID] = true
		batch = append(batch, f)
	}
	return batch
}

// candidates turns the fires the free read saw free into claim rows with fresh claim ids; a
// fire whose watermark reached it is AlreadyRun, one under a live lease that is not spent Lost.
func (p *protocol) candidates(batch []Fire, free View, res *Result) []Row {
	claims := make([]Row, 0, len(batch))
	for _, f := range batch {
		wm, hasWM := free.Watermarks[f.HuntID]
		if hasWM && wm >= f.Fire {
			res.AlreadyRun = append(res.AlreadyRun, f)
			continue
		}
		if l, ok := free.Leases[f.HuntID]; ok && l.Until.After(free.Now) && !(hasWM && l.Fire <= wm) {
			res.Lost = append(res.Lost, f)
			continue
		}
		claims = append(claims, Row{HuntID: f.HuntID, Fire: f.Fire, Owner: p.owner, ClaimID: p.newID()})
	}
	return claims
}

// insert writes the claim rows, statement by statement, and returns those that count.
//
// Each statement counts only if it was acknowledged within Settle of being sent. Its
// server-side check ran after the send and its rows committed before the acknowledgement, so
// this bounds check→commit, the part of the visibility lag this pod can measure: a peer that
// landed a claim our check missed verifies at least Settle after that claim's commit, so it sees
// our rows (on one endpoint; with replicas, while lag < Settle/2). A late statement's rows may
// have landed after such a peer verified and won; they are Lost and left to expire (a release
// could land over the winner). The free read is not part of this: nothing decided on it is
// trusted without the server-side re-check.
func (p *protocol) insert(ctx context.Context, claims []Row, res *Result) []Row {
	var landed []Row
	for _, part := range chunks(claims) {
		if res.Err != nil {
			res.Failed = append(res.Failed, rowFires(part)...) // not sent: the store is failing
			continue
		}
		sent, err := p.sendClaims(ctx, part)
		if err != nil {
			// The server may have applied the insert; those rows hold their hunts until they
			// expire, which is the price of an ambiguous failure. They are never released.
			res.Err = fmt.Errorf("lease: claim insert: %w", err)
			res.Failed = append(res.Failed, rowFires(part)...)
			continue
		}
		took := time.Since(sent)
		res.InsertTook = max(res.InsertTook, took)
		if took >= p.settle {
			p.log.WarnContext(ctx, "claim acknowledged too late to count; its hunts stay leased until the provisional lease expires",
				"fires", len(part), "took", took, "settle", p.settle)
			res.Lost = append(res.Lost, rowFires(part)...)
			continue
		}
		if took >= p.settle/2 {
			// Still counts, but close: ClickHouse delays inserts by up to max_delay_to_insert when
			// a partition has too many parts, and past the settle every claim is lost.
			p.log.WarnContext(ctx, "claim insert acknowledged close to the settle; ClickHouse may be delaying inserts "+
				"(parts_to_delay_insert) or overloaded; consider a longer --settle", "took", took, "settle", p.settle)
		}
		landed = append(landed, part...)
	}
	return landed
}

// claimRetries bounds how often a claim statement the server refused before executing it
// (Refused: a quorum insert into hunt_lease still pending, too many parts) is sent again.
const claimRetries = 3

// sendClaims sends one claim statement, again after a jittered wait while the server refuses
// it unexecuted, and returns when the attempt that was answered was sent: a refused attempt
// wrote nothing, so only the last one's send → acknowledgement is judged.
func (p *protocol) sendClaims(ctx context.Context, part []Row) (time.Time, error) {
	wait := p.settle / 4
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		err := p.store.InsertClaims(ctx, part, p.provisionalLease())
		if err == nil || !Refused(err) || attempt == claimRetries || !Sleep(ctx, p.jitter(wait)) {
			return sent, err
		}
		wait *= 2
	}
}

// winners sorts the landed claims by the verify read: a claim wins iff its row is the newest of
// its hunt and not tied on claimed with another claim's; a winner whose watermark has meanwhile
// reached its fire (a peer finished it) is AlreadyRun: its lease is spent, nothing to release.
func (p *protocol) winners(ctx context.Context, landed []Row, verify View, freeRead time.Time, res *Result) {
	for _, c := range landed {
		f := Fire{HuntID: c.HuntID, Fire: c.Fire}
		l, ok := verify.Leases[c.HuntID]
		if !ok || l.ClaimID != c.ClaimID || verify.Tied[c.HuntID] {
			// A tie on claimed is lost for every claim in it: a merge keeps the last inserted
			// of tied rows, not the greatest claim id, so a peer verifying after the merge
			// could see the other row alone and win it.
			res.Lost = append(res.Lost, f)
			p.log.DebugContext(ctx, "claim lost", "hunt_id", c.HuntID, "fire", c.Fire, "claim_id", c.ClaimID,
				"tied", verify.Tied[c.HuntID])
			continue
		}
		wm, hasWM := verify.Watermarks[c.HuntID]
		won := Lease{HuntID: l.HuntID, Fire: l.Fire, Owner: l.Owner, ClaimID: l.ClaimID, Claimed: l.Claimed, Until: l.Until,
			Trusted: freeRead.Add(p.provisionalLease() - p.settle), Watermark: wm, HasWatermark: hasWM,
			WatermarkInterval: verify.WatermarkIntervals[c.HuntID]}
		if hasWM && wm >= c.Fire {
			res.AlreadyRun = append(res.AlreadyRun, f)
			continue
		}
		res.Won = append(res.Won, won)
	}
}

// capped keeps the winners that fit under cp.Max and releases the rest, unrun. It reads, after
// the verify, every live lease of the scope (Store.Running); those that are not this batch's
// winners count against the cap whoever holds them and however they rank, and this batch's
// winners take what is left in the order they were asked for. Counting every other lease, not
// only those claimed before ours, is what makes the bound hold with replica clocks apart: a
// rank by claimed time would let two claims each rank the other after itself when the later
// one's clock runs behind (docs/claim-protocol.md, "The cap on runs in flight"). A winner the read cannot vouch
// for is not run: on a failed read all of them are released and Failed.
func (p *protocol) capped(ctx context.Context, cp Cap, res *Result) {
	running, err := p.store.Running(ctx, cp.Hunts)
	if err != nil {
		fires := leaseFires(res.Won)
		p.releaseUnrun(ctx, res.Won)
		res.Won = nil
		res.Failed = append(res.Failed, fires...)
		res.Err = fmt.Errorf("lease: cap read: %w", err)
		return
	}
	ours := make(map[uuid.UUID]bool, len(res.Won))
	for _, l := range res.Won {
		ours[l.ClaimID] = true
	}
	others := 0
	for _, r := range running {
		if !ours[r.ClaimID] {
			others++
		}
	}
	keep := max(cp.Max-others, 0)
	if keep >= len(res.Won) {
		return
	}
	over := res.Won[keep:]
	res.Won = res.Won[:keep:keep]
	res.Lost = append(res.Lost, leaseFires(over)...)
	res.OverCap += len(over)
	p.log.DebugContext(ctx, "claims over the cap released", "cap", cp.Max, "others_live", others, "kept", keep, "released", len(over))
	p.releaseUnrun(ctx, over)
}

// releaseUnrun ends won claims that will not run, fenced as every release is; on failure their
// provisional rows expire on their own (a lease that no one runs only delays its fire).
func (p *protocol) releaseUnrun(ctx context.Context, ls []Lease) {
	if err := p.store.Release(ctx, ls); err != nil {
		p.log.WarnContext(ctx, "releasing claims that will not run failed; they expire with the provisional lease", "fires", len(ls), "error", err)
	}
}

// extend turns won provisional claims into full leases: one fenced batch renewal, then one
// read-back. The renewal writes a row only while the claim's row is still the newest of its
// hunt and lives at least a settle more on the server's clock (Store.Extend's margin), and the
// statement may run for at most half a settle: a row it writes therefore lands while the
// provisional lease still has more than settle/2 to run, and with replica lag below settle/2
// every replica has it before the provisional row expires. A peer that finds the hunt free
// after that expiry sees the extension and writes nothing. This holds however late the answer
// comes back, so the read-back decides, not the answer: a winner whose extended row is visible
// is Won even when the answer was late or an error (the row landed; refusing it would hold the
// hunt for a whole lease with nobody running it), and one whose row is not visible is Lost and
// its row expires with the provisional lease.
func (p *protocol) extend(ctx context.Context, won []Lease, freeRead time.Time) ([]Lease, []Fire) {
	if p.provisionalLease() >= p.lease {
		return won, nil
	}
	fires := leaseFires(won)
	sent, err := p.sendExtend(ctx, won, freeRead)
	if err != nil && !Transient(err) {
		p.log.WarnContext(ctx, "extending won claims failed; their provisional leases will expire", "fires", len(won), "error", err)
		return nil, fires
	}
	if err != nil {
		p.log.WarnContext(ctx, "extending won claims answered an error that leaves the outcome unknown; reading back which landed",
			"fires", len(won), "error", err)
	}
	ids := make([]string, len(won))
	for i, l := range won {
		ids[i] = l.HuntID
	}
	v, err := p.store.Read(ctx, ids)
	if err != nil {
		p.log.WarnContext(ctx, "reading back extended claims failed; treating them as lost", "fires", len(won), "error", err)
		return nil, fires
	}
	var out []Lease
	var lost []Fire
	for _, l := range won {
		cur, ok := v.Leases[l.HuntID]
		if !ok || cur.ClaimID != l.ClaimID || !cur.Until.After(l.Until) || v.Tied[l.HuntID] {
			lost = append(lost, Fire{HuntID: l.HuntID, Fire: l.Fire})
			continue
		}
		l.Claimed, l.Until, l.Trusted = cur.Claimed, cur.Until, trustFrom(sent, cur, v.Now, p.lease, p.settle)
		out = append(out, l)
	}
	return out, lost
}

// sendExtend sends the extension, again after a jittered wait while the server refuses it
// unexecuted and its margin can still pass, and returns when the last attempt was sent.
func (p *protocol) sendExtend(ctx context.Context, won []Lease, freeRead time.Time) (time.Time, error) {
	wait := p.settle / 4
	for {
		sent := time.Now()
		err := p.store.Extend(ctx, won, p.lease, p.settle)
		// The free read precedes the rows' claimed: past this, no provisional row has the
		// margin left, and the fence would refuse the extension anyway.
		last := time.Since(freeRead)+wait >= p.provisionalLease()-p.settle
		if err == nil || !Refused(err) || last || !Sleep(ctx, p.jitter(wait)) {
			return sent, err
		}
		wait *= 2
	}
}

// renew extends l if its row is still the newest of the hunt and live, then reads back. An
// error from the write other than a definite one leaves its outcome unknown, so the read-back
// decides: the renewal counts when its row is visible, whatever the write answered.
func (p *protocol) renew(ctx context.Context, l Lease) (Lease, error) {
	start := time.Now()
	werr := p.store.Renew(ctx, l, p.lease)
	if werr != nil && !Transient(werr) {
		return l, fmt.Errorf("lease: renew %s: %w", l.HuntID, werr)
	}
	v, err := p.store.Read(ctx, []string{l.HuntID})
	if err != nil {
		if werr != nil {
			return l, fmt.Errorf("lease: renew %s: %w (read-back: %v)", l.HuntID, werr, err)
		}
		return l, fmt.Errorf("lease: renew read-back %s: %w", l.HuntID, err)
	}
	cur, ok := v.Leases[l.HuntID]
	switch {
	case !ok || cur.ClaimID != l.ClaimID:
		return l, fmt.Errorf("%w: hunt %s fire %d: newest claim is %s", ErrLost, l.HuntID, l.Fire, cur.ClaimID)
	case !cur.Until.After(v.Now):
		return l, fmt.Errorf("%w: hunt %s fire %d: expired at %s", ErrLost, l.HuntID, l.Fire, cur.Until.UTC().Format(time.RFC3339Nano))
	case !cur.Claimed.After(l.Claimed):
		// Still ours and live, but no renewal row is visible (refused, or not there yet): the
		// lease and its trust stay what they were; the caller tries again.
		if werr != nil {
			return l, fmt.Errorf("lease: renew %s: %w", l.HuntID, werr)
		}
		return l, fmt.Errorf("lease: renewal of hunt %s not visible yet, lease live until %s", l.HuntID, cur.Until.UTC().Format(time.RFC3339Nano))
	}
	l.Claimed, l.Until, l.Trusted = cur.Claimed, cur.Until, trustFrom(start, cur, v.Now, p.lease, p.settle)
	return l, nil
}

// trustFrom is the trust deadline (process clock) of a lease whose newest row a read-back saw
// as cur, at the server's now: the row's remaining life, counted from the send of the write
// that preceded the read-back, less a settle, and never more than a whole lease from that
// send. The remaining life comes from the visible row itself, so a row written by an earlier
// attempt (a retry the server deduplicated, a late answer) never stretches trust past its own
// end; the anchor is the send, which precedes the read, never the acknowledgement.
func trustFrom(sent time.Time, cur Row, now time.Time, lease, settle time.Duration) time.Time {
	return sent.Add(min(lease, cur.Until.Sub(now)) - settle)
}

func leaseFires(ls []Lease) []Fire {
	out := make([]Fire, len(ls))
	for i, l := range ls {
		out[i] = Fire{HuntID: l.HuntID, Fire: l.Fire}
	}
	return out
}

// provisionalLease is how long claim rows live before the winner extends them; without a
// provisional phase (0, or the whole lease) they are inserted with the whole lease.
func (p *protocol) provisionalLease() time.Duration {
	if p.provisional <= 0 || p.provisional > p.lease {
		return p.lease
	}
	return p.provisional
}

// fail marks fires Failed with err.
func (p *protocol) fail(res Result, fires []Fire, err error) (Result, error) {
	res.Failed = append(res.Failed, fires...)
	res.Err = err
	return p.result(res)
}

// result returns res with its error too when nothing in the batch got a definite outcome, so
// callers can tell a dead store from a partial failure.
func (p *protocol) result(res Result) (Result, error) {
	if res.Err != nil && len(res.Won)+len(res.Lost)+len(res.AlreadyRun) == 0 {
		return res, res.Err
	}
	return res, nil
}

func huntIDs(fires []Fire) []string {
	out := make([]string, len(fires))
	for i, f := range fires {
		out[i] = f.HuntID
	}
	return out
}

func rowIDs(rows []Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.HuntID
	}
	return out
}

func rowFires(rows []Row) []Fire {
	out := make([]Fire, len(rows))
	for i, r := range rows {
		out[i] = Fire{HuntID: r.HuntID, Fire: r.Fire}
	}
	return out
}
