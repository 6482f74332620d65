# Sourced by perf/scripts/compare.sh and perf/c/capi-compare.sh.
# RT=1 (root): each job under the real-time FIFO class with RT throttling
# off (restored on exit), so other work on the machine cannot preempt the
# two busy-polling ranks (see perf/src/bin/report.rs --rt); a timeout at a
# higher priority still ends a hung job. Sets RTW, the command prefix.
RTW=()
if [ "${RT:-0}" = 1 ]; then
    old_rt=$(cat /proc/sys/kernel/sched_rt_runtime_us)
    trap 'echo "$old_rt" >/proc/sys/kernel/sched_rt_runtime_us' EXIT
    echo -1 >/proc/sys/kernel/sched_rt_runtime_us
    RTW=(chrt -f 90 timeout 660 chrt -f 20)
fi
