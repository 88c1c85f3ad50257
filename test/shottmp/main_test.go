package shot

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/kargo-latch/kargo-latch/test/browser"
)

func TestShot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, stop, err := browser.New(ctx)
	if err != nil { t.Fatal(err) }
	defer stop()
	tab, c2 := chromedp.NewContext(b)
	defer c2()
	con, _ := browser.CaptureConsole(tab)
	u := os.Getenv("URL")
	if _, err := chromedp.Run(tab, chromedp.Navigate(u)); err != nil { t.Fatal(err) }
	if _, err := chromedp.Run(tab, chromedp.WaitVisible(chromedp.CSS(`[data-stage]`))); err != nil { t.Fatal(err) }
	time.Sleep(500*time.Millisecond)
	if err := browser.Screenshot(tab, os.Getenv("OUT")); err != nil { t.Fatal(err) }
	if con != nil { t.Log(con.Errors()) }
}
