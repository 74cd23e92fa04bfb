// Package notify delivers committed findings to people: webhooks (JSON, optionally HMAC
// signed), Alertmanager and Slack-compatible incoming webhooks.
//
// It is decoupled from the runner. A Dispatcher polls ClickHouse for committed runs with
// findings (rows of hunt_watermark, one per committed fire, and the hunt_findings rows with the
// same hunt_id and run_id) and delivers each (hunt, fire, sink) at least once:
//
//   - only committed runs are read, so an attempt that never committed never sends;
//   - a sink is owed only fires committed after it was first enabled (a row in hunt_delivery
//     records that, read back by every Dispatcher), plus its lookback, so enabling a sink
//     does not page for history; one hunt's deliveries to a sink go oldest fire first;
//   - the state of every (hunt, fire, sink) is a row in hunt_delivery (newest by updated):
//     pending, delivering (an attempt under a claim), retry, delivered, dead, suppressed or
//     muted;
//   - deliveries are claimed through the runner's claim protocol (package lease), one claim
//     per (hunt, sink) under the coordination key store.DeliveryKey ("<hunt>#deliver-<sink>")
//     in hunt_lease, for the oldest due fire; the holder sends that (hunt, sink)'s due fires
//     in fire order, renewing the claim every lease/3 until it releases it. So the
//     acknowledgement rule, the provisional lease, the trust deadline and the simulation of
//     lease cover deliveries too, and its bound holds for them: two Dispatchers never send the
//     same (hunt, fire, sink) at once while the visibility lag stays below Settle/2;
//   - every hunt_delivery write of an attempt (its start, its outcome) is fenced on that claim
//     being the newest row of its key and outliving the statement's server-side bound, which
//     ends at the trust deadline, and is read back by claim id: an outcome whose claim was lost
//     lands nowhere and is not counted; the next holder sends the delivery again. A
//     Dispatcher that dies mid-send leaves its claim, which a peer takes over once it expires;
//   - every attempt of a (hunt, fire, sink) carries the same idempotency key and the same body;
//   - failures (5xx, 429, timeouts, connection errors) are retried with exponential backoff up
//     to a horizon, then dead-lettered; other 4xx and 3xx are dead-lettered at once; Retry
//     re-queues dead letters.
//
// Suppression (a hunt's suppress: {by, for}) is decided per (hunt, fire) from hunt_suppress,
// which holds the keys notified by earlier fires, so it holds across Dispatchers and restarts.
// The SQL lives in package store (deliveries.go, suppress.go); a Dispatcher reaches it
// through the small interfaces in ports.go. Pausing a hunt does not stop the notifications of
// fires it already committed (a delivery key is not paused with its hunt). docs/findings.md is
// the operator's view.
// Mutes (mute_time_intervals of a sink or route, Alertmanager's time intervals, and a hunt's
// snooze, read through store) are judged when a claimed delivery would be sent; a muted
// delivery is recorded with the claim's fenced outcome write and is final (mute.go).
package notify
