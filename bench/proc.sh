# Helpers shared by bench/run.sh and bench/side_by_side.sh (sourced; the
# caller defines `die`): waiting for a process's line, and the CPU that
# processes and their SQLite threads used, from /proc.

# wait_line FILE PATTERN: the first line of FILE matching PATTERN (10 s at most).
wait_line() {
    for _ in $(seq 100); do
        if grep -m1 "$2" "$1" 2>/dev/null; then
            return
        fi
        sleep 0.1
    done
    die "timed out waiting for '$2' in $1: $(cat "$1" 2>/dev/null)"
}

HZ=$(getconf CLK_TCK)
# cpu_ticks PID...: user + system clock ticks used so far by these processes.
cpu_ticks() {
    local p total=0
    for p in "$@"; do
        [ -r "/proc/$p/stat" ] || continue
        total=$((total + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
    done
    echo "$total"
}
# stat_field N PID...: field N of /proc/PID/stat (counted after the
# command's name, so 12 is utime) summed over these processes. 13 is the
# system (kernel) part of cpu_ticks, the share of a request's CPU callgrind
# (bench/instructions.sh) does not count; 8 is minor page faults.
stat_field() {
    local n=$1 p total=0
    shift
    for p in "$@"; do
        [ -r "/proc/$p/stat" ] || continue
        total=$((total + $(sed 's/.*) //' "/proc/$p/stat" | awk -v n="$n" '{print $n}')))
    done
    echo "$total"
}
# db_ticks PID...: user + system clock ticks of these processes' SQLite
# threads (sqlx runs each connection's statements on a thread of its own,
# `sqlx-sqlite-worker-N`): the database's share of the gateway's CPU (the
# usage records' and the limit counters' writes), apart from the request
# path's. Threads that ended are not counted (the pool keeps its own).
db_ticks() {
    local p t total=0
    for p in "$@"; do
        for t in /proc/"$p"/task/*; do
            [ "$(cat "$t/comm" 2>/dev/null)" = sqlx-sqlite-wor ] || continue
            total=$((total + $(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{print $12 + $13}')))
        done
    done
    echo "$total"
}
