package zktest

import (
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
)

// DeleteTree deletes path and every node under it from the ZooKeeper at
// addr, authenticating as digest ("user:password") if it is not empty.
// Test packages call it from TestMain to remove the nodes of their run.
func DeleteTree(addr, path, digest string) error {
	c, events, err := zk.Connect([]string{addr}, 5*time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		return err
	}
	defer func() {
		c.Close()
		for range events {
		}
	}()
	if digest != "" {
		if err := c.AddAuth("digest", []byte(digest)); err != nil {
			return err
		}
	}
	return deleteTree(c, path)
}

func deleteTree(c *zk.Conn, path string) error {
	children, _, err := c.Children(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, child := range children {
		if err := deleteTree(c, path+"/"+child); err != nil {
			return err
		}
	}
	if err := c.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}
