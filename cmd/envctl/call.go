package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

// call is how a command makes its API call: it finds the server (a.client),
// runs do with the command's context and prints the result with a.emit
// (-o json, yaml or name), else with table. An error of either is the
// command's error.
func call[T any](a *app, cmd *cobra.Command, do func(ctx context.Context, c *client.Client) (T, error), table func(w io.Writer, v T)) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	v, err := do(cmd.Context(), c)
	if err != nil {
		return err
	}
	return a.emit(v, func(w io.Writer) { table(w, v) })
}

// one prints a single value with a table of many.
func one[T any](table func(io.Writer, ...T)) func(io.Writer, T) {
	return func(w io.Writer, v T) { table(w, v) }
}

// all prints a list with a table of many.
func all[T any](table func(io.Writer, ...T)) func(io.Writer, []T) {
	return func(w io.Writer, vs []T) { table(w, vs...) }
}
