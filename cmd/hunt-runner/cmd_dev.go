package main

import "github.com/urfave/cli/v2"

// devCommand is wired in main.go; its owner replaces this placeholder.
func devCommand() *cli.Command {
	return &cli.Command{Name: "dev", Usage: "(not built yet)", Action: func(*cli.Context) error {
		return cli.Exit("hunt-runner dev is not built yet", exitError)
	}}
}
