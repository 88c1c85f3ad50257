package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// normalizeChart copies the chart `helm package` wrote at from to to, as
// a function of the commit alone: helm stamps every entry with the time
// of packaging, so two releases of one commit would differ. The copy
// holds the same files with the same content and modes, each dated from
// the commit (created), in name order, in a gzip stream whose header
// holds no name and no time.
func normalizeChart(from, to string, created time.Time) error {
	type entry struct {
		hdr  tar.Header
		body []byte
	}
	f, err := os.Open(from)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	var entries []entry
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%s: %s is neither a file nor a directory", from, hdr.Name)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		entries = append(entries, entry{tar.Header{
			Typeflag: hdr.Typeflag, Name: hdr.Name, Mode: hdr.Mode, Size: int64(len(body)), ModTime: created,
		}, body})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.hdr.Name, b.hdr.Name) })

	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return err
		}
		if _, err := tw.Write(e.body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(to, buf.Bytes(), 0o644)
}
