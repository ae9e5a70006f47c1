package config

import (
	"strconv"
	"strings"
	"time"
)

// Report is when the weekly report (reclaimer/report) is sent through the
// notifiers: to the admins, to each namespace's owner and channel, to each
// bare-metal user. It reads Prometheus. Empty: not sent (GET
// /api/v1/report serves it any time).
type Report struct {
	// Day of the week it is sent (mon, tue, ...), At the time of day
	// (HH:MM, default 09:00), in Timezone (default UTC).
	Day      string `yaml:"day"`
	At       string `yaml:"at"`
	Timezone string `yaml:"timezone"`

	loc    *time.Location
	day    time.Weekday
	minute int
}

// On says whether the report is sent.
func (r Report) On() bool { return r.Day != "" }

// Next is the first time the report is due after t.
func (r Report) Next(t time.Time) time.Time {
	local := t.In(r.loc)
	y, m, d := local.Date()
	next := time.Date(y, m, d, r.minute/60, r.minute%60, 0, 0, r.loc)
	for next.Weekday() != r.day || !next.After(t) {
		next = next.AddDate(0, 0, 1)
	}
	return next
}

func (r *Report) validate(c *checker, prom Prometheus) {
	if !r.On() {
		if r.At != "" || r.Timezone != "" {
			c.errorf("report.day", "is required with report.at and report.timezone")
		}
		return
	}
	if !prom.On() {
		c.errorf("report", "reads Prometheus: set prometheus.url")
	}
	day, ok := weekdays[strings.ToLower(r.Day)]
	if !ok {
		c.errorf("report.day", "%q is not a day (mon, tue, ...)", r.Day)
	}
	r.day = day
	at := r.At
	if at == "" {
		at = "09:00"
	}
	if m := hhmm.FindStringSubmatch(at); m == nil {
		c.errorf("report.at", "%q is not a time of day (HH:MM)", r.At)
	} else {
		h, _ := strconv.Atoi(m[1]) // the pattern matched digits
		mi, _ := strconv.Atoi(m[2])
		r.minute = h*60 + mi
	}
	tz := r.Timezone
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		c.errorf("report.timezone", "%q is not a time zone (e.g. Europe/Berlin)", r.Timezone)
		loc = time.UTC
	}
	r.loc = loc
}
