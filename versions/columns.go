package versions

import (
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// columns is a row type's select list: each column's SQL expression next
// to the field it scans into, in one table, so that the list and the scan
// cannot drift apart (a column added is added once).
type columns[T any] []column[T]

type column[T any] struct {
	expr string
	into func(*T) any // the scan destination in a T
}

// list is the select list, comma-separated.
func (cs columns[T]) list() string {
	exprs := make([]string, len(cs))
	for i, c := range cs {
		exprs[i] = c.expr
	}
	return strings.Join(exprs, ", ")
}

// scan reads one row selected with list.
func (cs columns[T]) scan(row pgx.Row) (T, error) {
	var t T
	dest := make([]any, len(cs))
	for i, c := range cs {
		dest[i] = c.into(&t)
	}
	err := row.Scan(dest...)
	return t, err
}

// seconds scans a whole number of seconds into a Duration.
type seconds struct{ d *time.Duration }

func (s seconds) ScanInt64(v pgtype.Int8) error {
	*s.d = 0
	if v.Valid {
		*s.d = secondsDuration(v.Int64)
	}
	return nil
}

// fractionalSeconds scans a float number of seconds into a Duration.
type fractionalSeconds struct{ d *time.Duration }

func (s fractionalSeconds) ScanFloat64(v pgtype.Float8) error {
	*s.d = 0
	if v.Valid {
		*s.d = time.Duration(v.Float64 * float64(time.Second))
	}
	return nil
}
