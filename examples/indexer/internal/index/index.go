// Package index is the example indexer's store: crawl.docs documents in SQLite with an
// FTS5 full-text index (modernc.org/sqlite, pure Go, so the example builds without cgo).
//
// docs holds one row per URL; docs_fts is an external-content FTS5 table over its title,
// description and text, kept in step by triggers, so an upsert is one statement and the
// index can never disagree with the rows.
package index

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/trawl/trawl/shared/crawlmsg"
)

const schema = `
CREATE TABLE IF NOT EXISTS docs (
	url         TEXT PRIMARY KEY,
	title       TEXT NOT NULL DEFAULT '',
	description TEXT NOT NULL DEFAULT '',
	lang        TEXT NOT NULL DEFAULT '',
	text        TEXT NOT NULL DEFAULT '',
	fetched_at  INTEGER NOT NULL DEFAULT 0
);
CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(
	title, description, text,
	content='docs', content_rowid='rowid'
);
CREATE TRIGGER IF NOT EXISTS docs_ai AFTER INSERT ON docs BEGIN
	INSERT INTO docs_fts(rowid, title, description, text) VALUES (new.rowid, new.title, new.description, new.text);
END;
CREATE TRIGGER IF NOT EXISTS docs_ad AFTER DELETE ON docs BEGIN
	INSERT INTO docs_fts(docs_fts, rowid, title, description, text) VALUES ('delete', old.rowid, old.title, old.description, old.text);
END;
CREATE TRIGGER IF NOT EXISTS docs_au AFTER UPDATE ON docs BEGIN
	INSERT INTO docs_fts(docs_fts, rowid, title, description, text) VALUES ('delete', old.rowid, old.title, old.description, old.text);
	INSERT INTO docs_fts(rowid, title, description, text) VALUES (new.rowid, new.title, new.description, new.text);
END;
`

// upsert keeps the newest fetch of a URL: a replayed older document does not overwrite a
// newer one.
const upsert = `
INSERT INTO docs (url, title, description, lang, text, fetched_at) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (url) DO UPDATE SET
	title = excluded.title, description = excluded.description, lang = excluded.lang,
	text = excluded.text, fetched_at = excluded.fetched_at
WHERE excluded.fetched_at >= docs.fetched_at`

// Store is an open index.
type Store struct {
	db *sql.DB
}

// Open opens (creating if needed) the index at path.
func Open(ctx context.Context, path string) (*Store, error) {
	// WAL lets `indexer search` read while the consumer writes; busy_timeout makes a
	// writer wait for a reader's lock instead of failing.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return nil, fmt.Errorf("index: open %s: %w", path, err)
	}
	// One writer connection: SQLite serialises writes anyway.
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("index: create schema in %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Counts says what Apply did.
type Counts struct {
	Upserted int // documents written (or left alone because a newer fetch was indexed)
	Removed  int // noindex documents deleted from the index
}

// Apply writes a batch of documents in one transaction: all or nothing, so the caller
// acks the batch only once it is durable. A document marked noindex (<meta name=robots
// content=noindex>) removes its URL from the index instead.
func (s *Store) Apply(ctx context.Context, docs []crawlmsg.Document) (Counts, error) {
	var c Counts
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return c, fmt.Errorf("index: begin: %w", err)
	}
	defer tx.Rollback()
	up, err := tx.PrepareContext(ctx, upsert)
	if err != nil {
		return c, fmt.Errorf("index: prepare: %w", err)
	}
	defer up.Close()
	for _, d := range docs {
		if d.NoIndex {
			if _, err := tx.ExecContext(ctx, `DELETE FROM docs WHERE url = ?`, d.URL); err != nil {
				return c, fmt.Errorf("index: delete %s: %w", d.URL, err)
			}
			c.Removed++
			continue
		}
		if d.Unchanged && d.Status == http.StatusNotModified {
			// A recrawl answered 304 carries no content: the indexed copy stands, seen again.
			if _, err := tx.ExecContext(ctx, `UPDATE docs SET fetched_at = ? WHERE url = ? AND fetched_at < ?`, d.FetchedAt, d.URL, d.FetchedAt); err != nil {
				return c, fmt.Errorf("index: refresh %s: %w", d.URL, err)
			}
			c.Upserted++
			continue
		}
		if _, err := up.ExecContext(ctx, d.URL, d.Title, d.Description, d.Lang, d.Text, d.FetchedAt); err != nil {
			return c, fmt.Errorf("index: upsert %s: %w", d.URL, err)
		}
		c.Upserted++
	}
	if err := tx.Commit(); err != nil {
		return Counts{}, fmt.Errorf("index: commit: %w", err)
	}
	return c, nil
}

// Hit is one search result.
type Hit struct {
	URL   string
	Title string
	Score float64 // bm25: lower is better
}

// Query turns words into an FTS5 query matching documents that contain all of them.
// Every word is quoted, so punctuation in the input is never FTS5 syntax.
func Query(words string) string {
	var qs []string
	for _, w := range strings.Fields(words) {
		qs = append(qs, `"`+strings.ReplaceAll(w, `"`, `""`)+`"`)
	}
	return strings.Join(qs, " ")
}

// Search returns the best limit documents for an FTS5 query, ranked by bm25 with the
// title weighted above the description and the description above the text.
func (s *Store) Search(ctx context.Context, fts string, limit int) ([]Hit, error) {
	rows, err := s.db.QueryContext(ctx, `
SELECT d.url, d.title, bm25(docs_fts, 10.0, 4.0, 1.0) AS score
FROM docs_fts JOIN docs d ON d.rowid = docs_fts.rowid
WHERE docs_fts MATCH ?
ORDER BY score, d.url
LIMIT ?`, fts, limit)
	if err != nil {
		return nil, fmt.Errorf("index: search %q: %w", fts, err)
	}
	defer rows.Close()
	var hits []Hit
	for rows.Next() {
		var h Hit
		if err := rows.Scan(&h.URL, &h.Title, &h.Score); err != nil {
			return nil, fmt.Errorf("index: search %q: %w", fts, err)
		}
		hits = append(hits, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("index: search %q: %w", fts, err)
	}
	return hits, nil
}

// Count is the number of indexed documents.
func (s *Store) Count(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM docs`).Scan(&n); err != nil {
		return 0, fmt.Errorf("index: count: %w", err)
	}
	return n, nil
}
