package k8scluster

import (
	"net"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// The resolver answers the services' names and the aliases' (a suffix alias covers every
// name under it), and NXDOMAIN for the rest, which the pods' resolver then tries along
// its search path.
func TestResolverAnswers(t *testing.T) {
	r := &resolver{names: map[string]net.IP{
		"trawl-nats.trawl.svc.cluster.local.": net.IPv4(10, 96, 0, 10).To4(),
		".synth.test.":                        net.IPv4(10, 96, 0, 20).To4(),
	}}
	for _, tc := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		want  string
	}{
		{"trawl-nats.trawl.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "10.96.0.10"},
		{"TRAWL-NATS.trawl.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "10.96.0.10"},
		{"trawl-nats.trawl.svc.cluster.local.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, ""},
		{"vhost2.synth.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "10.96.0.20"},
		{"vhost2.synth.test.trawl.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		{"example.com.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
	} {
		t.Run(tc.name+"/"+tc.typ.String(), func(t *testing.T) {
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
			b.StartQuestions()
			b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(tc.name), Type: tc.typ, Class: dnsmessage.ClassINET})
			q, err := b.Finish()
			if err != nil {
				t.Fatal(err)
			}
			resp, err := r.answer(q)
			if err != nil {
				t.Fatal(err)
			}
			var m dnsmessage.Message
			if err := m.Unpack(resp); err != nil {
				t.Fatal(err)
			}
			if m.ID != 7 || m.RCode != tc.rcode {
				t.Fatalf("id %d rcode %v, want 7 %v", m.ID, m.RCode, tc.rcode)
			}
			got := ""
			if len(m.Answers) == 1 {
				a := m.Answers[0].Body.(*dnsmessage.AResource).A
				got = net.IP(a[:]).String()
			}
			if got != tc.want || len(m.Answers) > 1 {
				t.Fatalf("answers %v, want %q", m.Answers, tc.want)
			}
		})
	}
}
