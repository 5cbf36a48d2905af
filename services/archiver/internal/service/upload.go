package service

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/services/archiver/internal/config"
	"github.com/trawl/trawl/services/archiver/internal/upload"
	"github.com/trawl/trawl/shared/policy"
)

// stopUploadTimeout bounds the pass over sealed files when the archiver stops (the file
// sealed on stop is among them); what it does not finish, the next start resumes.
const stopUploadTimeout = time.Minute

// newUploads returns the queue of sealed files to upload, nil when no endpoint is set.
// The credentials are read once, from the secret files; their content is never logged.
func (s *Service) newUploads() (*upload.Queue, error) {
	c := s.cfg.S3
	if c.Endpoint == "" {
		return nil, nil
	}
	secrets := policy.DirSecrets(c.SecretsDir)
	access, err := secrets.Lookup(config.S3AccessKeySecret)
	if err != nil {
		return nil, fmt.Errorf("archiver: object storage credentials: %w", err)
	}
	secret, err := secrets.Lookup(config.S3SecretKeySecret)
	if err != nil {
		return nil, fmt.Errorf("archiver: object storage credentials: %w", err)
	}
	u, err := upload.New(upload.Config{
		Endpoint: c.Endpoint, Secure: c.TLS, Region: c.Region, Bucket: c.Bucket, Prefix: c.Prefix,
		AccessKey: access, SecretKey: secret, PartSize: c.PartSize, Attempts: c.Attempts,
		Backoff: time.Second, KeepLocal: c.KeepLocal,
	}, s.log)
	if err != nil {
		return nil, err
	}
	q := upload.NewQueue(u, s.cfg.Dir)
	q.Done = func(_ string, size int64, _ upload.Result, err error) {
		if err != nil {
			s.m.uploads.With(prometheus.Labels{"result": "failed"}).Inc()
			return
		}
		s.m.uploads.With(prometheus.Labels{"result": "ok"}).Inc()
		s.m.uploaded.Add(float64(size))
	}
	return q, nil
}

// runUploads uploads while the archiver runs and, once it stops (after the last seal),
// passes over the directory once more within stopUploadTimeout.
func (s *Service) runUploads() {
	if s.up == nil {
		return
	}
	s.run.Go("upload", s.up.Run)
	s.run.OnClose(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopUploadTimeout)
		defer cancel()
		if n := s.up.Pass(ctx); n > 0 {
			s.log.Warn("files not uploaded at stop; the next start uploads them", "files", n)
		}
	})
}
