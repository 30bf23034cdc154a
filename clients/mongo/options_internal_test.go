package mongo

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDefaults shows what the zero Options mean.
func TestDefaults(t *testing.T) {
	s, err := Options{}.check()
	if err != nil {
		t.Fatal(err)
	}
	if s.URI != DefaultURI || s.Database != DefaultDatabase || s.MaxPoolSize != 0 ||
		s.ConnectTimeout != DefaultConnectTimeout || s.SlowThreshold != DefaultSlowThreshold ||
		s.Name != DefaultName || s.Logger == nil || s.Registerer != prometheus.DefaultRegisterer {
		t.Errorf("the zero Options became %+v", s.Options)
	}

	// The URI's own values stand where the fields are zero.
	s, err = Options{URI: "mongodb://db1,db2/shop?replicaSet=rs0&connectTimeoutMS=1500&maxPoolSize=7"}.check()
	if err != nil {
		t.Fatal(err)
	}
	if s.Database != "shop" || s.ConnectTimeout != 1500*time.Millisecond || s.cs.MaxPoolSize != 7 || s.cs.ReplicaSet != "rs0" {
		t.Errorf("the URI's values became %+v", s.Options)
	}
	// Database wins over the URI's path.
	if s, _ := (Options{URI: "mongodb://db1/admin", Database: "shop"}).check(); s.Database != "shop" {
		t.Errorf("Database with a URI path became %q, want shop", s.Database)
	}
}
