// Package lease implements the claim protocol that lets any number of hunt-runner pods share
// the due fires of a hunt set through ClickHouse alone: each (hunt, fire) is claimed through
// a row in hunt_lease, run by the pod whose claim wins, and committed with writes fenced on
// the winning claim.
//
// # Rows and order
//
// hunt_lease is append-only. A row is (hunt_id, fire, owner, claim_id, claimed, lease_until).
// Every claim attempt has a fresh claim_id (also its insert_deduplication_token, so replicated
// deduplication never drops a new attempt as a copy of an old one). claimed is the server's
// now64(6); lease_until is the server's now64(3) + Options.Lease. The newest row of a hunt,
// by (claimed, claim_id), is the hunt's lease; every reader orders rows the same way, so all
// readers that see the same rows agree on the holder. A hunt is free when it has no lease row
// or its newest lease_until <= now (server clock).
//
// # States
//
//	free ──claim lands, still newest after settle──▶ held (Won)
//	 ▲                                                  │
//	 │  release (fenced) / lease_until passes           │ renew every lease/3 (fenced)
//	 └──────────────────────────────────────────────────┘
//
// A claim whose row is not the newest after the settle, whose row ties on claimed with
// another claim's at the top, or whose insert statement was acknowledged Settle or more after
// it was sent, is Lost. A Lost claim is never released: its row may
// sit below the winner's, and a release row would land above it and free the hunt under the
// winner. It holds nothing once a newer row exists, and an orphan row that does end up newest
// simply expires; the next tick claims again.
//
// # One batch, constant round trips
//
// Claim takes every due fire of a tick at once and does, whatever their number:
//
//  1. one free read: server clock, newest lease and watermark of every hunt;
//  2. one conditional INSERT … SELECT writing a claim row for every free candidate, which
//     re-checks freeness on the server (no live lease, watermark < fire) as it runs, so a pod
//     that read a hunt as free cannot overwrite a claim that landed since;
//  3. one wait of Options.Settle for the whole batch;
//  4. one verify read (newest lease and watermark again): a claim wins if its row is the
//     newest and no other claim's row has the same claimed; a won fire whose watermark has
//     meanwhile reached it (a peer finished it) is AlreadyRun;
//  5. one fenced release of the AlreadyRun fires, if any.
//
// # The guarantee, and its limit
//
// Let L be the visibility lag of a claim: the time from its server-side freeness check to the
// moment every replica a reader may reach has its row (insert duration plus replication lag).
// Two claims both land only if each check ran before the other's row was visible to it; the
// later row then reaches every reader within 2L of the earlier row's commit, and each verify
// runs at least Settle after its own commit. So:
//
//	At most one claim wins each (hunt, fire) while L < Settle/2.
//
// On a single endpoint this holds whatever the inserts take, because of the acknowledgement
// rule: a statement counts only if acknowledged within Settle of being sent, which bounds its
// check→commit by Settle, so any peer whose row our check missed verifies after our row
// landed. A pod paused between its free read and its insert is stopped by the server-side
// re-check, not by timing.
//
// Clock skew between replicas changes which claim wins, not how many: every verifier orders
// the same rows by claimed. Equal claimed is the one order readers cannot rely on:
// ReplacingMergeTree(claimed) collapses rows of one hunt with equal claimed to the last
// inserted, whatever the claim id, so a verifier reading before a merge and one reading after
// it could each see its own row as newest. A tie at the top is therefore lost for every claim
// in it (NewestLeaseSQL's tied column, View.Tied); after a merge only the survivor remains,
// and only its owner can win. A tie needs two claims of one hunt in the same server
// microsecond; it costs that fire a lease's wait, never a double run.
//
// Beyond the bound (replication lag of Settle/2 or more, a stalled replica) two pods can both
// win a fire. That costs nothing but work, because every output is idempotent per
// (hunt, fire): findings go to a ReplacingMergeTree keyed by (hunt_id, fire, finding_id) with
// finding_id a hash of the row, so a second run collapses into the first; the watermark write
// is fenced (watermark.Store.Advance writes only while the newest lease row is the writer's,
// for that fire, and live) and equals the fire either way. Coordinator.ReplicaDelay exposes
// system.replicas.absolute_delay so the runner can export it next to the settle and warn when
// it exceeds Settle/2. The simulation tests (sim_test.go) check both sides: no double win in
// thousands of scenarios below the bound (and on one endpoint at any insert latency, and
// with frequent ties and merges), doubles found above it.
//
// # The price of a late acknowledgement
//
// A late statement's rows have probably landed, and nothing can safely remove them: a release
// row would land above a peer that may have won underneath, and no read can prove there is no
// such peer (a merge of the peer's part with ours leaves no trace of it). So they stay as
// orphans: the hunt is leased to nobody until they expire, one whole Lease (5m by default),
// and a peer that won underneath loses its lease at its next renewal (its watermark write is
// fenced), so its fire waits too. Nothing is lost or run twice; the fire is late by up to a
// lease. Each statement (at most 2,000 fires) is judged on its own, so one slow statement
// does not cost the rest of the batch. Where inserts often take close to Settle, raise
// Settle (it costs every claim batch that much) or shorten Lease (renewals come every
// Lease/3).
//
// # Holding a lease
//
// The winner renews every Lease/3: Renew writes a copy of its row with a fresh claimed and
// lease_until, only while that row is still the newest and live, then reads back; ErrLost
// means another row is newest or the lease expired, and the runner must stop writing at once.
// Renewing an expired lease is refused because a peer may already be claiming the free hunt.
// Lease.Trusted is the local-clock deadline after which the holder must not trust the lease
// without a successful renewal: the attempt's start plus Lease minus Settle, so a slow round
// trip never stretches it. Release writes a row with lease_until = now and the same claim_id,
// only if that claim is still newest and live (a stale release never frees a peer's lease,
// and an expired lease, already free, is not released over a peer claiming it).
//
// The server clock is the only clock for lease comparisons; the process clock measures this
// pod's own round trips (the acknowledgement rule), times the settle, and bounds trust.
package lease
