package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/provision"
)

// provisionPasswordEnv is where --apply reads the new identity's password (or --password-file).
const provisionPasswordEnv = "HUNT_RUNNER_PROVISION_PASSWORD"

func provisionCommand() *cli.Command {
	return &cli.Command{
		Name:  "provision",
		Usage: "print (or --apply) the SQL that creates a least-privilege ClickHouse identity: scaler or runner",
		Description: `Prints the exact SQL for review and never connects; --apply runs it with the admin identity of
--clickhouse-url / --clickhouse-user / HUNT_RUNNER_CLICKHOUSE_PASSWORD. The last line is the SHA-256
of the text above it (check with: head -n -1 provision.sql | sha256sum); --expect-sha256 refuses
to apply anything but the reviewed text.

  scaler  a settings profile (readonly = 1, max_execution_time = 5) and a user allowed to
          SELECT the view <database>.hunt_backlog_v1 (one capped count, no ids; created by
          hunt-runner schema) and nothing else. The KEDA shim connects as it.
  runner  a user with SELECT, INSERT on the coordination and findings tables, SELECT on the
          source databases its hunts read (found in --hunts-dir / --git-url hunts, plus
          --source-database), SELECT on system.databases and system.replicas; no table
          functions that reach outside the server.

The password is never printed and never taken from a flag: --apply reads it from
HUNT_RUNNER_PROVISION_PASSWORD or --password-file. Re-applying changes nothing (an existing
user keeps its password).

  hunt-runner provision --role scaler > scaler.sql          # review, then:
  HUNT_RUNNER_PROVISION_PASSWORD=… hunt-runner provision --role scaler --apply --expect-sha256 <hash>`,
		Flags: concat(interactiveClickhouseFlags(), sourceFlags(), []cli.Flag{
			&cli.StringFlag{Name: "role", Required: true, EnvVars: envFor("role"),
				Usage: "identity to provision: scaler or runner"},
			&cli.StringFlag{Name: "user", EnvVars: envFor("user"),
				Usage: "name of the ClickHouse user to create (default hunt_scaler or hunt_runner)"},
			&cli.StringSliceFlag{Name: "source-database", EnvVars: envFor("source-database"),
				Usage: "runner: a database the hunts read (repeatable), in addition to those found in the hunts"},
			&cli.StringFlag{Name: "cluster", EnvVars: envFor("cluster"),
				Usage: "add ON CLUSTER NAME to every statement (access entities not replicated)"},
			&cli.BoolFlag{Name: "apply", EnvVars: envFor("apply"),
				Usage: "run the SQL (needs an admin identity and the new identity's password)"},
			&cli.StringFlag{Name: "password-file", EnvVars: envFor("password-file"),
				Usage: "file holding the new identity's password (or set " + provisionPasswordEnv + ")"},
			&cli.StringFlag{Name: "expect-sha256", EnvVars: envFor("expect-sha256"),
				Usage: "refuse to apply unless the generated SQL has this SHA-256 (the reviewed text)"},
		}),
		Action: runProvision,
	}
}

func runProvision(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("provision takes no arguments, got %q", c.Args().Slice()), exitUsage)
	}
	o, err := clickhouseOptions(c).WithDefaults()
	if err != nil {
		return cli.Exit(fmt.Sprintf("ClickHouse settings: %v", err), exitUsage)
	}
	opts := provision.Options{
		Role:            provision.Role(c.String("role")),
		Database:        o.Database,
		User:            c.String("user"),
		Cluster:         c.String("cluster"),
		SourceDatabases: c.StringSlice("source-database"),
	}
	if opts.Role == provision.RoleRunner && (c.String("hunts-dir") != "" || c.String("git-url") != "") {
		found, err := huntSourceDatabases(c, c.App.ErrWriter)
		if err != nil {
			return err
		}
		opts.SourceDatabases = append(opts.SourceDatabases, found...)
	}
	plan, err := provision.Generate(opts)
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	sum := plan.SHA256()
	fmt.Fprint(c.App.Writer, plan.Text())
	fmt.Fprintf(c.App.Writer, "-- sha256: %s\n", sum)
	if want := strings.TrimSpace(c.String("expect-sha256")); want != "" && !strings.EqualFold(want, sum) {
		return cli.Exit(fmt.Sprintf("generated SQL has sha256 %s, not the reviewed %s: review the new text first", sum, want), exitError)
	}
	if !c.Bool("apply") {
		return nil
	}
	password, err := provisionPassword(c.String("password-file"))
	if err != nil {
		return err
	}
	log := newLogger(c)
	conn, _, err := openClickHouse(c, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	n, err := plan.Apply(c.Context, conn, password)
	if err != nil {
		return err
	}
	log.Info("provisioned", "role", string(plan.Options.Role), "user", plan.Options.User, "statements", n, "sha256", sum)
	fmt.Fprintf(c.App.ErrWriter, "applied %d statements (sha256 %s)\n", n, sum)
	return nil
}

// provisionPassword reads the new identity's password from exactly one of the environment and
// the file.
func provisionPassword(file string) (string, error) {
	env := os.Getenv(provisionPasswordEnv)
	switch {
	case env != "" && file != "":
		return "", cli.Exit("give the password in "+provisionPasswordEnv+" or --password-file, not both", exitUsage)
	case env != "":
		return env, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", cli.Exit(fmt.Sprintf("--password-file: %v", err), exitUsage)
		}
		p := strings.TrimRight(string(b), "\r\n")
		if p == "" {
			return "", cli.Exit("--password-file "+file+" is empty", exitUsage)
		}
		return p, nil
	}
	return "", cli.Exit("--apply needs the new identity's password in "+provisionPasswordEnv+" or --password-file", exitUsage)
}

// huntSourceDatabases loads the hunts once and derives, lexically, the databases they read.
// Notes (unqualified tables, table functions) go to w for the operator.
func huntSourceDatabases(c *cli.Context, w io.Writer) ([]string, error) {
	src, err := huntSourceWith(c, newLogger(c), c.String("hunts-dir"), -1)
	if err != nil {
		return nil, err
	}
	set, err := src.Load(c.Context)
	if err != nil {
		return nil, fmt.Errorf("load hunts: %w", err)
	}
	queries := make(map[string]string, len(set.Hunts))
	for _, h := range set.Hunts {
		queries[h.ID] = h.Query
	}
	dbs, notes := provision.SourceDatabases(queries)
	for _, n := range notes {
		fmt.Fprintln(w, "note:", n)
	}
	for _, p := range set.Problems {
		fmt.Fprintln(w, "note: hunt file not loaded:", p.Error())
	}
	return dbs, nil
}
