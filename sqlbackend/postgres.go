package sqlbackend

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/stdlib"
)

// pgChannel is the LISTEN/NOTIFY channel of the Postgres dialect.
const pgChannel = "anarchon"

// pgMinVersion is the oldest PostgreSQL the dialect runs on (server_version_num).
const pgMinVersion = 120000

func pgCheckServer(ctx context.Context, db *sql.DB) error {
	if _, ok := db.Driver().(*stdlib.Driver); !ok {
		return fmt.Errorf("the Postgres dialect needs a *sql.DB of the pgx driver (github.com/jackc/pgx/v5/stdlib, sql.Open(\"pgx\", …)), not %T: it listens for notifications through it", db.Driver())
	}
	var v int
	if err := db.QueryRowContext(ctx, "SELECT current_setting('server_version_num')::int").Scan(&v); err != nil {
		return fmt.Errorf("checking the server: %w", err)
	}
	if v < pgMinVersion {
		return fmt.Errorf("PostgreSQL %d is too old: 12 or newer is needed", v)
	}
	return nil
}

// pgListen holds one connection of db LISTENing on pgChannel and hands each
// notification's payload to fn until ctx ends or the connection fails. The
// connection is discarded afterwards, never returned to the pool still listening.
// db must use the pgx driver (github.com/jackc/pgx/v5/stdlib).
func pgListen(ctx context.Context, db *sql.DB, ready func(), fn func(string)) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var listenErr error
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			listenErr = fmt.Errorf("the Postgres dialect listens through the pgx driver (github.com/jackc/pgx/v5/stdlib), not %T", dc)
			return listenErr
		}
		pc := c.Conn()
		if _, err := pc.Exec(ctx, "LISTEN "+pgChannel); err != nil {
			listenErr = err
			return driver.ErrBadConn
		}
		ready()
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				listenErr = err
				return driver.ErrBadConn // still listening: never back into the pool
			}
			fn(n.Payload)
		}
	})
	if listenErr != nil {
		return listenErr
	}
	if err == nil {
		err = errors.New("listener ended")
	}
	return err
}
