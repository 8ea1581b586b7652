// plans.go gives callers the client's side of the plan API
// (gostore/planclient).

package client

import "github.com/gostore/gostore/gostore/planclient"

// Plans is the client's side of the plan API: membership, write plans
// and reads of plan objects.
func (c *Client) Plans() *planclient.Client { return c.plans }
