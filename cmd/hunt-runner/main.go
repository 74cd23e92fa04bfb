// Command hunt-runner runs scheduled detection queries ("hunts") inside ClickHouse.
//
// This package is CLI wiring only: flags, environment, exit codes. Each subcommand lives in its
// own cmd_*.go file and delegates to the packages that own the behaviour.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
)

// Exit codes shared by every subcommand (materialise --detailed-exitcode adds its own).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// version is stamped by release builds: go build -ldflags "-X main.version=v1.2.3" (the
// Makefile's build and the Dockerfile do). Other builds report the module build info.
var version string

// buildVersion is what --version prints and run logs at start.
func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v // `go install …@v1.2.3`, or a build in a tagged checkout
	}
	v, dirty := "devel", false
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			v += "-" + s.Value[:12]
		case s.Key == "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		v += "-dirty"
	}
	return v
}

// logWriterKey in App.Metadata takes the logs instead of stderr, for a caller that embeds the
// app (the tests read what a command logged).
const logWriterKey = "log-writer"

func logWriter(c *cli.Context) io.Writer {
	if w, ok := c.App.Metadata[logWriterKey].(io.Writer); ok {
		return w
	}
	return os.Stderr
}

// epochLogKeys are the log attributes the runner packages pass as epoch seconds (their
// arithmetic is in seconds); people read them as times.
var epochLogKeys = map[string]bool{"fire": true, "window_start": true, "window_end": true,
	"gap_start": true, "gap_end": true, "watermark": true, "requested_fire": true}

// readableTimes writes log times in UTC RFC 3339, whatever the host's zone (the times people
// compare logs with — ClickHouse's clock, status, hunt_run — are UTC), and the epoch-second
// attributes of the runner packages as such times rather than bare numbers.
func readableTimes(groups []string, a slog.Attr) slog.Attr {
	switch {
	case a.Value.Kind() == slog.KindTime:
		a.Value = slog.TimeValue(a.Value.Time().UTC())
	case a.Value.Kind() == slog.KindInt64 && epochLogKeys[a.Key]:
		a.Value = slog.StringValue(time.Unix(a.Value.Int64(), 0).UTC().Format(time.RFC3339))
	}
	return a
}

func main() {
	os.Exit(run(os.Args))
}

func run(args []string) int {
	// Signals are handled once, here: SIGINT/SIGTERM cancel the context every command runs
	// under, and long-running commands (run, shim, dev) drain on that.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	defer closeOfflineEngine()
	app := newApp()
	if err := app.RunContext(ctx, args); err != nil {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			if msg := err.Error(); msg != "" {
				fmt.Fprintln(os.Stderr, "hunt-runner:", msg)
			}
			return ec.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "hunt-runner:", err)
		return exitError
	}
	return exitOK
}

func newApp() *cli.App {
	app := &cli.App{
		Name:    "hunt-runner",
		Version: buildVersion(),
		Usage:   "run scheduled ClickHouse detection queries (hunts) exactly once across pods",
		Description: "Hunts are YAML files (ClickHouse SQL + a schedule) kept in a directory or a git repository.\n" +
			"Every flag can also be set with the environment variable HUNT_RUNNER_<FLAG>, for example\n" +
			"HUNT_RUNNER_CLICKHOUSE_URL. The ClickHouse password is read only from\n" +
			"HUNT_RUNNER_CLICKHOUSE_PASSWORD or --clickhouse-password-file, never from a flag value.",
		Flags:                []cli.Flag{logLevelFlag()},
		EnableBashCompletion: true,
		// run() prints and maps errors itself; the default handler would os.Exit mid-test.
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{
			runCommand(),
			materialiseCommand(),
			dueCommand(),
			shimCommand(),
			schemaCommand(),
			validateCommand(),
			statusCommand(),
			triggerCommand(),
			pauseCommand(),
			resumeCommand(),
			snoozeCommand(),
			unsnoozeCommand(),
			backfillCommand(),
			provisionCommand(),
			importLegacyCommand(),
			devCommand(),
			findingsCommand(),
			notifyCommand(),
			testCommand(),
			previewCommand(),
			diffCommand(),
			costCommand(),
		},
		OnUsageError: usageError,
		Action:       unknownCommand,
	}
	oneGrammar(app.Commands)
	return app
}

// oneGrammar gives every command (subcommands too) the global flags, so that
// `status --log-level debug` works as `--log-level debug status` does (lookupString reads the
// innermost that was set), and the one-line usage error.
func oneGrammar(cmds []*cli.Command) {
	for _, c := range cmds {
		c.Flags = append(c.Flags, logLevelFlag())
		c.OnUsageError = usageError
		oneGrammar(c.Subcommands)
	}
}

// usageError is a bad flag or flag value: exit 2 with the one line that says what is wrong and
// where the help is, instead of the whole help page.
func usageError(c *cli.Context, err error, _ bool) error {
	name := c.App.Name
	if c.Command != nil && c.Command.Name != "" {
		name = c.Command.HelpName
		if name == "" {
			name = c.App.Name + " " + c.Command.Name
		}
	}
	msg := strings.NewReplacer("for flag -", "for flag --", "defined: -", "defined: --").Replace(err.Error())
	// run() prefixes "hunt-runner: " already.
	return cli.Exit(fmt.Sprintf("%s: %s (see `%s --help`)", strings.TrimPrefix(name, c.App.Name+" "), msg, name), exitUsage)
}

// unknownCommand runs when no command matched: the help without arguments, else a usage error
// naming the command (urfave/cli's default prints "No help topic" and exits 3).
func unknownCommand(c *cli.Context) error {
	if !c.Args().Present() {
		return cli.ShowAppHelp(c)
	}
	names := []string{}
	for _, cmd := range c.App.Commands {
		names = append(names, cmd.Name)
	}
	hint := ""
	if s := nearestID(c.Args().First(), names); s != "" {
		hint = fmt.Sprintf("; did you mean %q?", s)
	}
	return cli.Exit(fmt.Sprintf("unknown command %q%s (see `%s --help`)", c.Args().First(), hint, c.App.Name), exitUsage)
}
