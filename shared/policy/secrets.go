package policy

// Secrets resolves the secret names rules refer to (cookies, credentials, header
// secrets). The values live outside Redis, as files in TRAWL_SECRETS_DIR (default
// /run/secrets, where Docker Compose and Kubernetes mount secrets): the file's content,
// trailing newline removed, is the value. A value is never logged, printed or exported:
// errors name the secret, never its content.
type Secrets interface {
	Lookup(name string) (string, error)
}

// DirSecrets reads secrets from a directory, reading a file again when it changes, so a
// rotated secret takes effect without a restart.
func DirSecrets(dir string) Secrets { return newDirSecrets(dir) }
