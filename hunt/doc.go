// Package hunt is the one definition of a hunt that every other package uses: the Hunt as a
// hunt file defines it (configsrc decodes into it), the Set of hunts one load yields, every
// default of an optional hunt field as a named constant applied in one place (WithDefaults),
// and the typed vocabulary of runs: RunStatus (hunt_run.status) and Kind (hunt_run.kind,
// hunt_watermark.kind).
//
// It is a leaf: it imports only the standard library, so the decoder, the runner, notify,
// status, legacy, schedule's materialise rows and hunttest can all use it without cycles.
// Derived, compiled state (a prepared statement, a schedule grid) belongs to the package that
// derives it, next to a *Hunt, never as a second copy of the hunt's fields.
//
// Adding a field to a hunt touches this package (the field, its default, and Hash if it
// changes behaviour), the decoder (configsrc), and the code that uses it; nothing else.
package hunt
