package wacz

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Verify checks the package at path as a replay tool relies on it and returns every
// problem found, joined: datapackage.json is WACZ 1.1.1 and lists every entry but itself
// and its digest, with the sha256 and size each entry has; datapackage-digest.json holds
// datapackage.json's sha256; every archive/ entry is stored uncompressed; pages.jsonl
// starts with its header; the index is sorted and names only files in archive/.
func Verify(path string) error {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return fmt.Errorf("wacz: open %s: %w", path, err)
	}
	defer zr.Close()
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	entries := map[string]*zip.File{}
	for _, f := range zr.File {
		if entries[f.Name] != nil {
			bad("entry %s twice", f.Name)
		}
		entries[f.Name] = f
	}
	read := func(name string) []byte {
		f := entries[name]
		if f == nil {
			bad("no %s", name)
			return nil
		}
		b, err := readEntry(f)
		if err != nil {
			bad("%s: %v", name, err)
		}
		return b
	}
	dpJSON := read(DataPackagePath)
	var dg Digest
	if b := read(DigestPath); b != nil {
		if err := json.Unmarshal(b, &dg); err != nil {
			bad("%s: %v", DigestPath, err)
		} else if dg.Path != DataPackagePath || dg.Hash != sha256Of(dpJSON) {
			bad("%s names %s %s; datapackage.json is %s", DigestPath, dg.Path, dg.Hash, sha256Of(dpJSON))
		}
	}
	var dp DataPackage
	if dpJSON != nil {
		if err := json.Unmarshal(dpJSON, &dp); err != nil {
			bad("%s: %v", DataPackagePath, err)
		}
	}
	if dp.Profile != "data-package" || dp.WACZVersion != Version {
		bad("datapackage.json: profile %q, wacz_version %q; want data-package, %s", dp.Profile, dp.WACZVersion, Version)
	}
	listed := map[string]bool{}
	for _, r := range dp.Resources {
		listed[r.Path] = true
		f := entries[r.Path]
		if f == nil {
			bad("resource %s: no such entry", r.Path)
			continue
		}
		h, n, err := hashEntry(f)
		if err != nil {
			bad("resource %s: %v", r.Path, err)
			continue
		}
		if h != r.Hash || n != r.Bytes {
			bad("resource %s: datapackage.json says %s, %d bytes; the entry is %s, %d bytes", r.Path, r.Hash, r.Bytes, h, n)
		}
	}
	warcs := map[string]bool{}
	for name, f := range entries {
		if name == DataPackagePath || name == DigestPath {
			continue
		}
		if !listed[name] {
			bad("entry %s is not a resource of datapackage.json", name)
		}
		if strings.HasPrefix(name, archivePrefix) {
			warcs[strings.TrimPrefix(name, archivePrefix)] = true
			if f.Method != zip.Store {
				bad("%s is compressed (method %d): a WARC file must be stored", name, f.Method)
			}
		}
	}
	if len(warcs) == 0 {
		bad("no WARC file in %s", archivePrefix)
	}
	if b := read(PagesPath); b != nil {
		first, _, _ := strings.Cut(string(b), "\n")
		var h map[string]any
		if json.Unmarshal([]byte(first), &h) != nil || h["format"] != "json-pages-1.0" {
			bad("%s: first line %.80q is not the json-pages-1.0 header", PagesPath, first)
		}
	}
	if b := read(IndexPath); b != nil {
		prev := ""
		for i, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			if l < prev {
				bad("%s line %d is out of order", IndexPath, i+1)
			}
			prev = l
			_, _, js, err := ParseLine(l)
			if err != nil {
				bad("%s line %d: %v", IndexPath, i+1, err)
				continue
			}
			var e indexLine
			if err := json.Unmarshal([]byte(js), &e); err != nil || !warcs[e.Filename] {
				bad("%s line %d names %q, not a file of %s (%v)", IndexPath, i+1, e.Filename, archivePrefix, err)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("wacz: %s: %w", path, errors.Join(errs...))
	}
	return nil
}

func readEntry(f *zip.File) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func hashEntry(f *zip.File) (string, int64, error) {
	rc, err := f.Open()
	if err != nil {
		return "", 0, err
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc) // archive/zip checks the CRC-32 at the end
	if err != nil {
		return "", 0, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}
