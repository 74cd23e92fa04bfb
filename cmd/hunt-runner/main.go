// Command hunt-runner runs scheduled detection queries ("hunts") inside ClickHouse.
//
// This package is CLI wiring only: flags, environment, exit codes. Each subcommand lives in its
// own cmd_*.go file and delegates to the packages that own the behaviour.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

// Exit codes shared by every subcommand. materialise uses exitChanged to tell "wrote something"
// from "nothing to do".
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitChanged = 3
)

func main() {
	os.Exit(run(os.Args))
}

func run(args []string) int {
	// Signals are handled once, here: SIGINT/SIGTERM cancel the context every command runs
	// under, and long-running commands (run, shim, dev) drain on that.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
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
	return &cli.App{
		Name:  "hunt-runner",
		Usage: "run scheduled ClickHouse detection queries (hunts) exactly once across pods",
		Description: "Hunts are YAML files (ClickHouse SQL + a schedule) kept in a directory or a git repository.\n" +
			"Every flag can also be set with the environment variable HUNT_RUNNER_<FLAG>, for example\n" +
			"HUNT_RUNNER_CLICKHOUSE_URL. The ClickHouse password is read only from\n" +
			"HUNT_RUNNER_CLICKHOUSE_PASSWORD or --clickhouse-password-file, never from a flag value.",
		Flags:                []cli.Flag{logLevelFlag},
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
			provisionCommand(),
			devCommand(),
			findingsCommand(),
			notifyCommand(),
		},
	}
}
