// Package legacy moves a deployment of the earlier (Python) hunt runner to hunt-runner.
//
// Import carries the earlier runner's progress over: its hunt_watermark (epoch seconds, newest
// row per hunt by updated) becomes one commit row of kind "imported" in hunt-runner's
// hunt_watermark, so the hunt's first run starts exactly where the earlier runner stopped —
// no window re-run, none skipped. The earlier runner's watermark meant the same thing as
// hunt-runner's (the exclusive end of the data read), so the value is copied, shifted only by
// the hunt's delay (hunt-runner reads [watermark − delay, fire − delay)). The write is a
// conditional INSERT … SELECT that lands only while the hunt has no watermark at or beyond
// the imported one, so a runner that committed in the meantime is never overtaken, and a
// second import finds every hunt done and writes nothing. While hunt-runner's runners are live
// (their heartbeats recent) Import refuses to write, unless forced: an imported row could move
// a watermark beneath a lease one of them holds; and, forced or not, a hunt whose newest lease is
// live and not spent is refused (a runner without heartbeats may hold it).
//
// Report reads hunt files in the earlier runner's shape (raw YAML, independently of configsrc)
// and lists, per file and line, what does not carry over and what to write instead.
package legacy
