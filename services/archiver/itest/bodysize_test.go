package itest

import (
	"bytes"
	"testing"

	"github.com/trawl/trawl/devstack/warccheck"
)

// A body stored by reference whose size is not the one its page says is not that page's
// body, and no retry reads another: the page is terminated (the consumer settles) and
// nothing of it is archived, while the pages around it are.
func TestBodyOfAnotherSizeTerminated(t *testing.T) {
	s := newStack(t, nil)
	stop := s.start()

	body := bytes.Repeat([]byte("R"), 3000)
	resized := exchange("http://a.example/resized", 200, "Content-Type: text/plain\r\n", body, false)
	ref := s.putObject("page:r1", body)
	ref.Size++
	resized.Meta.BodyRef, resized.Body = ref, nil
	s.publish(resized, "r1")
	s.publish(exchange("http://a.example/next", 200, "Content-Type: text/html\r\n", []byte("<html>next</html>"), false), "r2")
	s.waitArchived()
	stop()

	a, err := warccheck.Check(s.dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	caps := capturesByURL(a)
	if n := len(caps["http://a.example/resized"]); n != 0 {
		t.Errorf("%d captures of the page whose body has another size, want none", n)
	}
	if n := len(caps["http://a.example/next"]); n != 1 {
		t.Errorf("%d captures of the page after it, want 1", n)
	}
}
