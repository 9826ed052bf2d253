package versions

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// Node roles: a node that joins with a join token logs in to the database
// as a role of its own, a member of envd_node (migrations/0028_node_role.sql
// says what that role may and may not do), never as the admin's role.

// NodeRole is the name of the login role of node: envd_node_ and 16 hex
// digits of the name's SHA-256 (node names are longer than role names may
// be, and hold characters roles should not).
func NodeRole(node string) string {
	sum := sha256.Sum256([]byte(node))
	return "envd_node_" + hex.EncodeToString(sum[:8])
}

// CreateNodeRole makes node's login role, member of envd_node, with a new
// random password (a role made at an earlier join gets a new one: the old
// password stops working), and returns its name and password.
// ErrFailedPrecondition when there is no envd_node role (the admin's role
// could not create roles) or this role may not create roles.
func (s Nodes) CreateNodeRole(ctx context.Context, node string) (role, password string, err error) {
	var ok bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'envd_node')`).Scan(&ok); err != nil {
		return "", "", translate(err, "look for the envd_node role")
	}
	if !ok {
		return "", "", fmt.Errorf("the database has no envd_node role (the role that ran envd's migrations may not create roles): %w", errdefs.ErrFailedPrecondition)
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	role, password = NodeRole(node), hex.EncodeToString(b[:]) // hex: safe inside a literal
	ident := pgx.Identifier{role}.Sanitize()
	var exists bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil {
		return "", "", translate(err, "look for the node's role")
	}
	if exists { // the node joined before
		_, err = s.db.Exec(ctx, "ALTER ROLE "+ident+" LOGIN PASSWORD '"+password+"'")
		if err == nil {
			_, err = s.db.Exec(ctx, "GRANT envd_node TO "+ident)
		}
	} else {
		_, err = s.db.Exec(ctx, "CREATE ROLE "+ident+" LOGIN PASSWORD '"+password+"' IN ROLE envd_node")
	}
	if err != nil {
		return "", "", translate(err, fmt.Sprintf("the database role of node %q", node))
	}
	return role, password, nil
}

// AdminRole reports whether the store's database role is the admin's: it
// may create API tokens (a node's role, envd_node, may not).
func (s Nodes) AdminRole(ctx context.Context) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, `SELECT has_table_privilege('tokens', 'INSERT')`).Scan(&ok)
	return ok, translate(err, "the database role's rights")
}

// DSNWithRole is dsn (URL or keyword/value form) logging in as role with
// password instead of its own user.
func DSNWithRole(dsn, role, password string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			// The parse error may quote the password: do not include it.
			return "", fmt.Errorf("database connection string: %w", errdefs.ErrInvalidArgument)
		}
		u.User = url.UserPassword(role, password)
		return u.String(), nil
	}
	// A later keyword overrides an earlier one; role names and passwords
	// made here need no quoting.
	return dsn + " user=" + role + " password=" + password, nil
}
