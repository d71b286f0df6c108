// Wake-up latency and a pacer's send lag at a fixed interval (issue 50 item 6;
// docs/pacing.md). One thread sleeps until shortly before each intended time
// and spins the rest, its spin learnt as src/record/schedule.rs's Spin learns
// it (up nine 250 ns steps when a sleep ended later than the spin, down one
// otherwise, capped). Prints how late each sleep ended and how late each
// "send" (the clock read once the spin reached the intended time) was.
// Build: gcc -O2 -o /tmp/wake_lag scripts/wake_lag.c
// Run:   /tmp/wake_lag <interval_us> <spin_cap_us> <seconds> <fifo 0|1>
//        (fifo 1 needs root or CAP_SYS_NICE)
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <sched.h>
#include <sys/prctl.h>
static uint64_t now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
static uint64_t tcpu(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
static int cmp(const void*a,const void*b){uint64_t x=*(uint64_t*)a,y=*(uint64_t*)b;return x<y?-1:x>y;}
static double q(uint64_t*v,size_t n,double p){size_t i=(size_t)(p*(n-1));return v[i]/1e3;}
int main(int c,char**v){
  uint64_t iv=atoll(v[1])*1000, cap=atoll(v[2])*1000; double secs=atof(v[3]); int fifo=atoi(v[4]);
  prctl(PR_SET_TIMERSLACK,1UL);
  if(fifo){struct sched_param sp={.sched_priority=10}; if(sched_setscheduler(0,SCHED_FIFO,&sp)){perror("fifo");return 1;}}
  size_t n=(size_t)(secs*1e9/iv); uint64_t*wake=malloc(n*8),*lag=malloc(n*8);
  uint64_t spin=cap, t0=now()+1000000, c0=tcpu();
  for(size_t i=0;i<n;i++){
    uint64_t target=t0+i*iv, until=target-spin;
    uint64_t t=now(); uint64_t w=0;
    if(until>t){struct timespec ts={until/1000000000ull,until%1000000000ull};
      clock_nanosleep(CLOCK_MONOTONIC,TIMER_ABSTIME,&ts,NULL); t=now(); w=t>until?t-until:0;
      // the pacer's learnt p90 of the oversleep (src/record/schedule.rs Spin)
      if(w>spin){spin+=9*250; if(spin>cap)spin=cap;} else {spin=spin>=250+1000?spin-250:(cap<1000?cap:1000);}
    }
    while((t=now())<target){}
    wake[i]=w; lag[i]=t-target;
  }
  double busy=(tcpu()-c0)/(secs*1e9);
  qsort(wake,n,8,cmp); qsort(lag,n,8,cmp);
  printf("interval=%lluus cap=%lluus fifo=%d n=%zu wake_late p50=%.1f p99=%.1f p99.9=%.1f max=%.0f us | send_lag p50=%.1f p99=%.1f p99.9=%.1f us | thread busy %.0f%%\n",
    (unsigned long long)(iv/1000),(unsigned long long)(cap/1000),fifo,n,q(wake,n,.5),q(wake,n,.99),q(wake,n,.999),wake[n-1]/1e3,q(lag,n,.5),q(lag,n,.99),q(lag,n,.999),busy*100);
  return 0;}
