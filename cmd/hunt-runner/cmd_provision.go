package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/provision"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// provisionPasswordEnv is where --apply reads the new identity's password (or --password-file).
const provisionPasswordEnv = "HUNT_RUNNER_PROVISION_PASSWORD"

func provisionCommand() *cli.Command {
	return &cli.Command{
		Name:  "provision",
		Usage: "print (or --apply) the SQL that creates a least-privilege ClickHouse identity: runner, materialiser, hunts or scaler",
		Description: `Prints the exact SQL for review and never connects; --apply runs it with the admin identity of
--clickhouse-url / --clickhouse-user / HUNT_RUNNER_CLICKHOUSE_PASSWORD. The last line is the SHA-256
of the text above it (check with: head -n -1 provision.sql | sha256sum); --expect-sha256 refuses
to apply anything but the reviewed text.

` + roleHelp(schema.IdentityRunner, "runner", "SELECT on system.databases and system.replicas. No source data.") +
			roleHelp(schema.IdentityMaterialiser, "materialiser", "SELECT on system.databases; nothing else (materialise and trigger).") + `  hunts         the identity hunt queries run as (run --hunts-user): SELECT on the databases named
                by --source-database (required; never derived from hunt text), a settings profile
                with readonly = 2 CONST and MAX limits on max_execution_time and max_memory_usage;
                no URL, REMOTE, FILE or S3 privileges and nothing on the coordination database.
  scaler        a settings profile (readonly = 1, max_execution_time = 5) and a user allowed to
                SELECT the view <database>.hunt_backlog_v1 (one capped count, no ids; created by
                hunt-runner schema) and hunt_schema (the layout check), nothing else. The KEDA
                shim connects as it.

The password is never printed and never taken from a flag: --apply reads it from
HUNT_RUNNER_PROVISION_PASSWORD or --password-file. Re-applying changes nothing (an existing
user keeps its password); with --rotate-password the text also sets the password of an
existing user, so applying it rotates.

  hunt-runner provision --role hunts --source-database logs > hunts.sql   # review, then:
  HUNT_RUNNER_PROVISION_PASSWORD=… hunt-runner provision --role hunts --source-database logs --apply --expect-sha256 <hash>`,
		Flags: concat(interactiveClickhouseFlags(), []cli.Flag{
			&cli.StringFlag{Name: "role", Required: true, EnvVars: envFor("role"),
				Usage: "identity to provision: runner, materialiser, hunts or scaler"},
			&cli.StringFlag{Name: "user", EnvVars: envFor("user"),
				Usage: "name of the ClickHouse user to create (default hunt_<role>)"},
			&cli.StringSliceFlag{Name: "source-database", EnvVars: envFor("source-database"),
				Usage: "hunts: a database hunts may read (repeatable, at least one)"},
			&cli.IntFlag{Name: "max-execution-time", EnvVars: envFor("max-execution-time"),
				Usage: "profile limit in seconds: the scaler's (default 5) or the hunts' ceiling (default 3600)"},
			&cli.Int64Flag{Name: "max-memory-usage", EnvVars: envFor("max-memory-usage"),
				Usage: "hunts: per-query memory ceiling in bytes (default 8 GiB)"},
			&cli.Int64Flag{Name: "max-result-bytes", EnvVars: envFor("max-result-bytes"),
				Usage: "hunts: ceiling on a query's result in bytes, over which it fails (default 1 GiB; also applies to each shard's partial result)"},
			&cli.BoolFlag{Name: "rotate-password", EnvVars: envFor("rotate-password"),
				Usage: "also set the password of an existing user (rotation); the SQL and its SHA-256 change accordingly"},
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
		Role:             provision.Role(c.String("role")),
		Database:         o.Database,
		User:             c.String("user"),
		Cluster:          c.String("cluster"),
		SourceDatabases:  c.StringSlice("source-database"),
		RotatePassword:   c.Bool("rotate-password"),
		MaxExecutionTime: c.Int("max-execution-time"),
		MaxMemoryUsage:   c.Int64("max-memory-usage"),
		MaxResultBytes:   c.Int64("max-result-bytes"),
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

// roleHelp is the help text's entry for identity id: the tables schema.Grants gives it (the one
// list provision grants from, so the help cannot drift from the SQL), then rest.
func roleHelp(id schema.Identity, role, rest string) string {
	var rw, ro []string
	for _, a := range schema.Grants(id) {
		if a.Insert {
			rw = append(rw, a.Table)
		} else {
			ro = append(ro, a.Table)
		}
	}
	var parts []string
	if len(rw) > 0 {
		parts = append(parts, "SELECT, INSERT on "+joinAnd(rw))
	}
	if len(ro) > 0 {
		parts = append(parts, "SELECT on "+joinAnd(ro))
	}
	text := strings.Join(append(parts, rest), "; ")
	const indent, width = 16, 100
	var b strings.Builder
	b.WriteString(fmt.Sprintf("  %-*s", indent-2, role))
	col := indent
	for i, w := range strings.Fields(text) {
		if i > 0 && col+1+len(w) > width {
			b.WriteString("\n" + strings.Repeat(" ", indent))
			col = indent
		} else if i > 0 {
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String() + "\n"
}

// joinAnd lists names as prose: "a, b and c".
func joinAnd(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
