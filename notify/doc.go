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
//     pending, delivering (a claim with a lease), retry, delivered, dead, suppressed or muted;
//   - a sender claims a delivery with a conditional INSERT … SELECT stamped by the server clock,
//     waits a settle and reads back; every later write is fenced on "the newest row is ours and
//     its lease is live", so two Dispatchers never send the same (hunt, fire, sink) at once, and
//     a Dispatcher that dies mid-send leaves a lease a peer takes over once it expires;
//   - every attempt of a (hunt, fire, sink) carries the same idempotency key and the same body;
//   - failures (5xx, 429, timeouts, connection errors) are retried with exponential backoff up
//     to a horizon, then dead-lettered; other 4xx and 3xx are dead-lettered at once; Retry
//     re-queues dead letters.
//
// Suppression (a hunt's suppress: {by, for}) is decided per (hunt, fire) from hunt_suppress,
// which holds the keys notified by earlier fires, so it holds across Dispatchers and restarts.
// Mutes (mute_time_intervals of a sink or route, Alertmanager's time intervals, and a hunt's
// snooze, read through store) are judged when a claimed delivery would be sent; a muted
// delivery is recorded with the claim's fenced outcome write and is final (mute.go).
//
// docs/findings.md is the operator's view.
package notify
