// Package e2e holds end-to-end tests with real processes: the hunt-runner binary, built by the
// test, running against a private chlocal process (internal/chtest). They are skipped with
// -short and, like every engine test, skipped without CHDB_LIB_PATH (failed under CI=true).
package e2e
