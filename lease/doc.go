// Package lease implements the claim protocol that lets any number of hunt-runner pods share
// the due fires of a hunt set through ClickHouse alone: each (hunt, fire) is claimed through a
// row in hunt_lease, run by the pod whose claim wins, and committed with writes fenced on the
// winning claim. docs/claim-protocol.md has the SQL, the derivation, the simulation and the
// measurements; this comment states the guarantee and the states.
//
// The package is the protocol alone: it writes no SQL. It runs over its Store port (four
// writes and two reads, the second only under a Cap; each one round trip per MaxStatement
// hunts); store.Store.Leases is the ClickHouse implementation, and the simulation drives the
// same protocol through an in-memory Store with replica lag. A Coordinator is safe for concurrent use by multiple goroutines.
//
// # Rows and order
//
// hunt_lease is append-only: (hunt_id, fire, owner, claim_id, claimed, lease_until), claimed
// and lease_until on the server's clock. The newest row of a hunt by (claimed, claim_id) is
// its lease; a hunt is free when it has none, its newest lease_until <= now, or that lease is
// spent: its fire is committed (fire <= the hunt's watermark). A lease protects one fire, so
// the commit of that fire frees the hunt without a release.
//
// # States
//
//	free ──claim lands (provisional lease), newest after settle, extended──▶ held (Won)
//	 ▲                                                                        │
//	 │  commit (spent) / release (fenced) / lease_until passes    renew every lease/3 (fenced)
//	 └────────────────────────────────────────────────────────────────────────┘
//
// Claim takes a whole batch in a constant number of round trips (free read, one conditional
// insert, one settle, verify read, one batch extension and its read-back). A claim is Lost
// when its row is not the newest after the settle, ties on claimed with another claim's at the
// top, was acknowledged Settle or more after it was sent, or its extension is not visible on
// read-back (the extension writes only while the provisional row has a settle left, so however
// late its answer, a visible extension is safe); a Lost claim is never released (its release
// would land above the winner), and its row expires with the provisional lease. A claim skips a
// hunt whose newest hunt_pause row pauses it. Every row written goes just above the hunt's
// newest row when that row's claimed is ahead of the server's clock, so a clock stepped back
// delays claims by at most the step.
//
// # The guarantee
//
// Let L be a claim's visibility lag: from its server-side freeness check until every replica a
// reader may reach has its row.
//
//	At most one claim wins each (hunt, fire) while L < Settle/2.
//
// On a single endpoint it holds whatever the inserts take (the acknowledgement rule). Clock
// skew between replicas changes which claim wins, not how many. Beyond the bound two pods can
// both win; store.Store.Advance's compare-and-set and the committed findings view keep
// the outputs exact except when both commits overlap in time (docs/claim-protocol.md).
//
// # The cap
//
// ClaimCapped also holds a scope's live leases to Cap.Max across all claimers: after the
// verify it reads every live lease of the scope (Store.Running), counts those that are not the
// batch's winners, and releases the winners beyond what is left, unrun. Under the bound above,
// at no instant are more than Cap.Max kept leases of the scope live (docs/claim-protocol.md).
//
// # Holding a lease
//
// Lease.Trusted is the process-clock deadline after which the holder must stop writing
// without a successful Renew: the send of the write its read-back followed, plus the visible
// row's remaining life (at most a lease), minus Settle. Renew and Release write only while the
// holder's row is the newest and live, and a renewal's outcome is what its read-back shows.
//
// # Outcomes
//
// Refused and Transient sort a failed statement: refused before executing (retry after
// Jitter), unknown (read back by the write's id first), or final. The
// server clock is the only clock for lease comparisons; the process clock measures this pod's
// own round trips, times the settle and bounds trust.
package lease
