package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// SSH: the tenant's keys (ssh-key), and the keyless way in: `envctl ssh`
// runs the system's ssh with envctl itself as the ProxyCommand
// (ssh-proxy), which carries the connection over the API's WebSocket
// route, logged in by the API token. The node's host key comes from
// GET /v1/info and is written to a known_hosts file of envctl's under an
// alias, so ssh checks it strictly without asking.

func (a *app) sshCommands() []*cobra.Command {
	return []*cobra.Command{a.sshKeyCommand(), a.sshCommand(), a.sshProxyCommand(), a.sshConfigCommand()}
}

func (a *app) sshKeyCommand() *cobra.Command {
	var file, name string
	add := &cobra.Command{
		Use:   "add [-f KEY.pub] [--name N]",
		Short: "Register a public key: it logs in to every instance of your tenant (ssh INSTANCE@HOST -p PORT)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			text, err := a.readPublicKey(file)
			if err != nil {
				return err
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.SSHKey, error) {
				return c.AddSSHKey(ctx, types.AddSSHKeyRequest{PublicKey: text, Name: name})
			}, one(sshKeyTable))
		},
	}
	add.Flags().StringVarP(&file, "file", "f", "", "public key file, - for stdin (default: ~/.ssh/id_ed25519.pub, else id_ecdsa.pub, else id_rsa.pub)")
	add.Flags().StringVar(&name, "name", "", "a label (default: the key's comment)")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List your tenant's SSH keys",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.SSHKey, error) {
				return c.ListSSHKeys(ctx)
			}, all(sshKeyTable))
		},
	}
	rm := &cobra.Command{
		Use:   "rm ID|FINGERPRINT|NAME",
		Short: "Remove an SSH key: new logins with it are refused",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.SSHKey, error) {
				id, err := strconv.ParseInt(args[0], 10, 64)
				if err != nil {
					if id, err = findSSHKey(ctx, c, args[0]); err != nil {
						return types.SSHKey{}, err
					}
				}
				return c.DeleteSSHKey(ctx, id)
			}, one(sshKeyTable))
		},
	}
	return group("ssh-key", "Your tenant's SSH public keys", add, ls, rm)
}

// findSSHKey finds a key by fingerprint or name; a name must be unique.
func findSSHKey(ctx context.Context, c *client.Client, s string) (int64, error) {
	keys, err := c.ListSSHKeys(ctx)
	if err != nil {
		return 0, err
	}
	var found []int64
	for _, k := range keys {
		if k.Fingerprint == s || k.Name == s {
			found = append(found, k.ID)
		}
	}
	switch len(found) {
	case 0:
		return 0, fmt.Errorf("ssh key %q: no key has this id, fingerprint or name (see envctl ssh-key ls)", s)
	case 1:
		return found[0], nil
	}
	return 0, usageError{fmt.Errorf("ssh key %q: %d keys have this name; give the id", s, len(found))}
}

func (a *app) readPublicKey(file string) (string, error) {
	if file == "-" {
		b, err := io.ReadAll(io.LimitReader(a.stdin, 64<<10))
		return string(b), err
	}
	if file != "" {
		b, err := os.ReadFile(file)
		return string(b), err
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	for _, n := range []string{"id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub"} {
		if b, err := os.ReadFile(filepath.Join(home, ".ssh", n)); err == nil {
			return string(b), nil
		}
	}
	return "", usageError{errors.New("no public key in ~/.ssh (id_ed25519.pub, id_ecdsa.pub, id_rsa.pub): give one with -f, or make one with ssh-keygen -t ed25519")}
}

func sshKeyTable(w io.Writer, ks ...types.SSHKey) {
	row(w, "ID", "NAME", "FINGERPRINT", "CREATED")
	for _, k := range ks {
		row(w, k.ID, k.Name, k.Fingerprint, formatTime(k.CreatedAt))
	}
}

// sshHostPrefix names instances in ssh's host names: envd-INSTANCE.
const sshHostPrefix = "envd-"

// knownHosts writes the node's host key under the alias envd-node-NODE to
// envctl's known_hosts file (replacing an older line of that alias) and
// returns the file and the alias.
func (a *app) knownHosts(ctx context.Context, c *client.Client, file string) (string, string, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return "", "", err
	}
	if info.SSH == nil {
		return "", "", fmt.Errorf("node %s serves no SSH (envd --ssh-listen)", info.Node)
	}
	if file == "" {
		dir, err := os.UserConfigDir()
		if err != nil {
			return "", "", fmt.Errorf("known_hosts: %w (give --known-hosts)", err)
		}
		file = filepath.Join(dir, "envd", "known_hosts")
	}
	alias := "envd-node-" + info.Node
	var lines []string
	if b, err := os.ReadFile(file); err == nil {
		for l := range strings.SplitSeq(strings.TrimRight(string(b), "\n"), "\n") {
			if l != "" && !strings.HasPrefix(l, alias+" ") {
				lines = append(lines, l)
			}
		}
	}
	lines = append(lines, alias+" "+info.SSH.HostKey)
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return "", "", err
	}
	if err := writeReplacing(file, []byte(strings.Join(lines, "\n")+"\n")); err != nil {
		return "", "", err
	}
	return file, alias, nil
}

// proxyCommand is the ProxyCommand of instance (a %n pattern included),
// envctl itself with the flags that find the server; the token is never on
// a command line (ssh passes its environment to the ProxyCommand).
func (a *app) proxyCommand(instance string, withFlags bool) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	parts := []string{shellQuote(exe)}
	if withFlags {
		for _, f := range [][2]string{{"--url", a.url}, {"--data-dir", a.dataDir}, {"--ca-cert", a.caCert}} {
			if f[1] != "" {
				v := f[1]
				if f[0] != "--url" {
					if abs, err := filepath.Abs(v); err == nil {
						v = abs
					}
				}
				parts = append(parts, f[0], shellQuote(v))
			}
		}
	}
	return strings.Join(append(parts, "ssh-proxy", instance), " "), nil
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+=:@,%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (a *app) sshCommand() *cobra.Command {
	var knownHostsFile string
	var sshOpts []string
	cmd := &cobra.Command{
		Use:   "ssh INSTANCE [-- COMMAND...]",
		Short: "Open a shell in an instance, or run a command, with the system's ssh and no key setup",
		Long: `Open a shell in an instance (or run COMMAND) with the system's OpenSSH client,
logged in by the API token: ssh's ProxyCommand is "envctl ssh-proxy INSTANCE",
which carries the connection over GET /v1/instances/{i}/ssh. The node's host
key (from envctl info) is written to envctl's known_hosts file and checked
strictly. Exit code: the command's, or ssh's 255 on a connection failure.`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			file, alias, err := a.knownHosts(cmd.Context(), c, knownHostsFile)
			if err != nil {
				return err
			}
			proxy, err := a.proxyCommand(args[0], false)
			if err != nil {
				return err
			}
			sshArgs := []string{
				"-o", "ProxyCommand=" + proxy,
				"-o", "HostKeyAlias=" + alias,
				"-o", "UserKnownHostsFile=" + file,
				"-o", "GlobalKnownHostsFile=/dev/null",
				"-o", "StrictHostKeyChecking=yes",
				"-o", "User=" + args[0],
			}
			for _, o := range sshOpts {
				sshArgs = append(sshArgs, "-o", o)
			}
			sshArgs = append(sshArgs, sshHostPrefix+args[0])
			if len(args) > 1 {
				sshArgs = append(append(sshArgs, "--"), args[1:]...)
			}
			ssh := exec.CommandContext(cmd.Context(), "ssh", sshArgs...)
			ssh.Stdin, ssh.Stdout, ssh.Stderr = a.stdin, a.stdout, a.stderr
			// The ProxyCommand finds the server as this envctl did.
			ssh.Env = os.Environ()
			for k, v := range map[string]string{"ENVD_URL": a.url, "ENVD_TOKEN": a.token, "ENVD_DATA_DIR": a.dataDir, "ENVD_CA_CERT": a.caCert} {
				if v != "" {
					if k == "ENVD_DATA_DIR" || k == "ENVD_CA_CERT" {
						v, _ = filepath.Abs(v)
					}
					ssh.Env = append(ssh.Env, k+"="+v)
				}
			}
			err = ssh.Run()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return &exitCodeError{code: ee.ExitCode()}
			}
			if errors.Is(err, exec.ErrNotFound) {
				return fmt.Errorf("ssh: the OpenSSH client is not installed (apt-get install openssh-client): %w", err)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&knownHostsFile, "known-hosts", "", "known_hosts file envctl writes the node's host key to (default: $XDG_CONFIG_HOME/envd/known_hosts)")
	cmd.Flags().StringArrayVarP(&sshOpts, "ssh-option", "O", nil, "more ssh -o options, e.g. -O ServerAliveInterval=15 (repeatable)")
	return cmd
}

func (a *app) sshProxyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "ssh-proxy INSTANCE",
		Short: "Carry an SSH connection to an instance on stdin and stdout (ssh's ProxyCommand)",
		Long: `Carry an SSH connection to INSTANCE on stdin and stdout, over the API's
WebSocket route GET /v1/instances/{i}/ssh, logged in by the API token: the
ProxyCommand of "envctl ssh" and "envctl ssh-config". INSTANCE may be given
as envd-INSTANCE (ssh's %n).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			id := strings.TrimPrefix(args[0], sshHostPrefix)
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			conn, err := c.SSHTunnel(ctx, id)
			if err != nil {
				return err
			}
			defer conn.Close()
			done := make(chan struct{}, 2)
			go func() {
				_, _ = io.Copy(conn, a.stdin)
				done <- struct{}{}
			}()
			go func() {
				_, _ = io.Copy(a.stdout, conn)
				done <- struct{}{}
			}()
			<-done
			return nil
		},
	}
}

func (a *app) sshConfigCommand() *cobra.Command {
	var knownHostsFile string
	cmd := &cobra.Command{
		Use:   "ssh-config [INSTANCE...]",
		Short: "Print a ~/.ssh/config block for VS Code Remote-SSH, JetBrains Gateway or plain ssh, no key setup",
		Long: `Print a ~/.ssh/config block: "Host envd-INSTANCE" with envctl ssh-proxy as its
ProxyCommand (logged in by the API token) and the node's host key, which is
written to envctl's known_hosts file. Without INSTANCE, one "Host envd-*"
block serves every instance. Append it to ~/.ssh/config, then connect to
envd-INSTANCE (ssh envd-INSTANCE; VS Code: "Remote-SSH: Connect to Host").
The ProxyCommand finds the server as envctl does: --url and --data-dir given
here are written into it; a token comes from ENVD_TOKEN or the data dir's
token file, never from the config file.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			file, alias, err := a.knownHosts(cmd.Context(), c, knownHostsFile)
			if err != nil {
				return err
			}
			hosts := args
			if len(hosts) == 0 {
				hosts = []string{"*"}
			}
			var b strings.Builder
			for _, h := range hosts {
				target := h
				if h == "*" {
					target = "%n"
				} else if _, err := c.GetInstance(cmd.Context(), h); err != nil {
					return err
				}
				proxy, err := a.proxyCommand(target, true)
				if err != nil {
					return err
				}
				fmt.Fprintf(&b, "Host %s%s\n", sshHostPrefix, h)
				if h != "*" {
					fmt.Fprintf(&b, "  User %s\n", h)
				}
				fmt.Fprintf(&b, "  ProxyCommand %s\n", proxy)
				fmt.Fprintf(&b, "  HostKeyAlias %s\n", alias)
				fmt.Fprintf(&b, "  UserKnownHostsFile %s\n", shellQuote(file))
				fmt.Fprintf(&b, "  StrictHostKeyChecking yes\n")
				fmt.Fprintf(&b, "  ServerAliveInterval 30\n\n")
			}
			_, err = io.WriteString(a.stdout, b.String())
			return err
		},
	}
	cmd.Flags().StringVar(&knownHostsFile, "known-hosts", "", "known_hosts file envctl writes the node's host key to (default: $XDG_CONFIG_HOME/envd/known_hosts)")
	return cmd
}

func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageError{fmt.Errorf("%s: want at least %d arguments, got %d (usage: %s)", cmdName(cmd), n, len(args), cmd.UseLine())}
		}
		return nil
	}
}

// writeReplacing writes file (0600) through a temporary file and a rename,
// so that an ssh reading it meanwhile sees the old or the new content.
func writeReplacing(file string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), ".known_hosts-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}
