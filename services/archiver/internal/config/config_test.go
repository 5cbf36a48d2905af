package config

import (
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string // substring of the error; "" = valid
	}{
		{"defaults with a dir", map[string]string{"TRAWL_ARCHIVE_DIR": "/a"}, ""},
		{"dir required", map[string]string{}, "TRAWL_ARCHIVE_DIR is required"},
		{"tiny size", map[string]string{"TRAWL_ARCHIVE_DIR": "/a", "TRAWL_ARCHIVE_MAX_SIZE": "1KiB"}, "TRAWL_ARCHIVE_MAX_SIZE"},
		{"id with a slash", map[string]string{"TRAWL_ARCHIVE_DIR": "/a", "TRAWL_ARCHIVE_ID": "a/b"}, "TRAWL_ARCHIVE_ID"},
		{"operator on two lines", map[string]string{"TRAWL_ARCHIVE_DIR": "/a", "TRAWL_ARCHIVE_OPERATOR": "a\nb"}, "TRAWL_ARCHIVE_OPERATOR"},
		{"batch zero", map[string]string{"TRAWL_ARCHIVE_DIR": "/a", "TRAWL_ARCHIVE_BATCH": "0"}, "TRAWL_ARCHIVE_BATCH"},
		{"s3 on", map[string]string{"TRAWL_ARCHIVE_DIR": "/a", "TRAWL_ARCHIVE_S3_ENDPOINT": "s3.example:9000", "TRAWL_ARCHIVE_S3_BUCKET": "b"}, ""},
		{"s3 without bucket", map[string]string{"TRAWL_ARCHIVE_DIR": "/a", "TRAWL_ARCHIVE_S3_ENDPOINT": "s3.example"}, "TRAWL_ARCHIVE_S3_BUCKET"},
		{"s3 endpoint as URL", map[string]string{"TRAWL_ARCHIVE_DIR": "/a", "TRAWL_ARCHIVE_S3_ENDPOINT": "https://s3.example/", "TRAWL_ARCHIVE_S3_BUCKET": "b"}, "TRAWL_ARCHIVE_S3_ENDPOINT"},
		{"s3 part under 5MiB", map[string]string{"TRAWL_ARCHIVE_DIR": "/a", "TRAWL_ARCHIVE_S3_ENDPOINT": "s3.example", "TRAWL_ARCHIVE_S3_BUCKET": "b", "TRAWL_ARCHIVE_S3_PART_SIZE": "1MiB"}, "TRAWL_ARCHIVE_S3_PART_SIZE"},
		{"s3 over 10,000 parts", map[string]string{"TRAWL_ARCHIVE_DIR": "/a", "TRAWL_ARCHIVE_MAX_SIZE": "64GiB", "TRAWL_ARCHIVE_S3_ENDPOINT": "s3.example", "TRAWL_ARCHIVE_S3_BUCKET": "b", "TRAWL_ARCHIVE_S3_PART_SIZE": "5MiB"}, "10,000 parts"},
		{"s3 attempts zero", map[string]string{"TRAWL_ARCHIVE_DIR": "/a", "TRAWL_ARCHIVE_S3_ENDPOINT": "s3.example", "TRAWL_ARCHIVE_S3_BUCKET": "b", "TRAWL_ARCHIVE_S3_ATTEMPTS": "0"}, "TRAWL_ARCHIVE_S3_ATTEMPTS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(envconfig.FromMap(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid config refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestDefaultIDIsValid(t *testing.T) {
	if id := defaultID(); !idRE.MatchString(id) {
		t.Fatalf("default id %q is not a valid TRAWL_ARCHIVE_ID", id)
	}
}
