//! A simulator: runs a workflow against scripted agents on a virtual clock, the way the NATS
//! shell would, with no I/O, no sleeps and no tokio. Used by scenario tests, property tests
//! and benchmarks.
//!
//! Every event goes through [`super::apply`]; with [`Sim::check_replay`] on (the default),
//! the state is also round-tripped through serde JSON before each event and the copy must
//! produce the same commands and the same state: that is what a replica resuming a run does.
//!
//! Faults for property tests: [`Answer::Events`] lets a script answer with any events (twice,
//! for a stale attempt, contradicting itself); [`Sim::crash_after_commit`] drops the command
//! batch of chosen events and redelivers them (a replica died between commit and side
//! effects); [`Sim::redeliver`] re-applies chosen events after their commands were carried
//! out (the triggering message was not acked).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde_json::Value;

use super::state::Execution;
use super::types::{
    Command, Dispatch, Event, ExecutionId, Failure, FailureClass, Millis, RunError, RunStatus,
    TimerId,
};
use crate::definition::Workflow;

/// How a scripted agent answers one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Succeed with this output after the delay.
    Output(Value),
    /// Fail with this message (and optional error kind) after the delay.
    Fail(String, Option<String>),
    /// Never answer (the call times out).
    Silence,
    /// Deliver exactly these events, each at the reply's delay plus its own: answers sent
    /// twice, for another attempt, or contradicting each other.
    Events(Vec<(Duration, Event)>),
}

/// A scripted answer with its delay.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// How long the agent takes.
    pub after: Duration,
    /// The answer, delivered `after` the request.
    pub answer: Answer,
}

impl Reply {
    /// Succeed at once with `output`.
    pub fn ok(output: Value) -> Reply {
        Reply {
            after: Duration::ZERO,
            answer: Answer::Output(output),
        }
    }

    /// Fail at once with `message`.
    pub fn fail(message: &str) -> Reply {
        Reply {
            after: Duration::ZERO,
            answer: Answer::Fail(message.into(), None),
        }
    }

    /// Never answer.
    pub fn silence() -> Reply {
        Reply {
            after: Duration::ZERO,
            answer: Answer::Silence,
        }
    }

    /// The same answer after `d`.
    pub fn after(mut self, d: Duration) -> Reply {
        self.after = d;
        self
    }
}

/// A scripted agent: given a request, how it answers.
pub type Script = Box<dyn FnMut(&Dispatch) -> Reply>;

/// Something scheduled on the virtual clock.
#[derive(Debug, Clone)]
enum Due {
    Event(Event),
    Timer(TimerId),
}

/// The simulator of one run.
pub struct Sim<'w> {
    workflow: &'w Workflow,
    /// The run's state.
    pub state: Execution,
    /// The virtual clock: starts at 1 000 000 ms and jumps to each scheduled event.
    pub now: Millis,
    agents: HashMap<String, Script>,
    schedule: BTreeMap<(Millis, u64), Due>,
    /// Armed timers by key, so a re-armed timer replaces the old one as the shell does.
    timers: HashMap<TimerId, (Millis, u64)>,
    seq: u64,
    /// Every command, in order.
    pub commands: Vec<Command>,
    /// Every event applied, with its time.
    pub events: Vec<(Millis, Event)>,
    /// Round-trip the state through serde before each event and compare (default on).
    pub check_replay: bool,
    /// Deliver every agent answer twice (duplicates must be absorbed).
    pub duplicate_answers: bool,
    /// Stop after this many events (a guard against a run that never ends).
    pub max_events: usize,
    /// The most calls running at once so far.
    pub max_running: usize,
    /// Indexes (into [`Sim::events`]) of events whose replica commits the new state and
    /// dies before carrying out the commands: the batch goes to [`Sim::lost`] and the
    /// unacked event is redelivered at once to a replica that loads the committed state.
    pub crash_after_commit: BTreeSet<usize>,
    /// Indexes of events whose commands are carried out but whose message is not acked:
    /// the same event is applied again at once.
    pub redeliver: BTreeSet<usize>,
    /// Model the shell's outbox: a crashed event's committed commands are carried out when
    /// it is redelivered, instead of applying it again (and losing them). Off by default.
    pub outbox: bool,
    /// Commands committed but not carried out by the replica that computed them (see
    /// `crash_after_commit`; with `outbox`, they are carried out on redelivery).
    pub lost: Vec<Command>,
    /// For each redelivered event: its index in [`Sim::events`] and the commands it gave.
    pub redeliveries: Vec<(usize, Vec<Command>)>,
}

impl<'w> Sim<'w> {
    /// A simulator for `workflow`, not started, at time 1 000 000 ms.
    pub fn new(workflow: &'w Workflow) -> Sim<'w> {
        Sim {
            workflow,
            state: Execution::new(ExecutionId("sim".into()), &workflow.name),
            now: Millis(1_000_000),
            agents: HashMap::new(),
            schedule: BTreeMap::new(),
            timers: HashMap::new(),
            seq: 0,
            commands: Vec::new(),
            events: Vec::new(),
            check_replay: true,
            duplicate_answers: false,
            max_events: 1_000_000,
            max_running: 0,
            crash_after_commit: BTreeSet::new(),
            redeliver: BTreeSet::new(),
            outbox: false,
            lost: Vec::new(),
            redeliveries: Vec::new(),
        }
    }

    /// Scripts the agent `name`.
    pub fn agent(mut self, name: &str, script: impl FnMut(&Dispatch) -> Reply + 'static) -> Self {
        self.agents.insert(name.to_string(), Box::new(script));
        self
    }

    /// Schedules an external event `after` the start.
    pub fn at(&mut self, after: Duration, event: Event) {
        let at = self.now.plus(after);
        self.push(at, Due::Event(event));
    }

    fn push(&mut self, at: Millis, due: Due) -> (Millis, u64) {
        self.seq += 1;
        self.schedule.insert((at, self.seq), due);
        (at, self.seq)
    }

    /// Starts the run with `input` and runs it to its end (or until nothing is scheduled).
    pub fn run(&mut self, input: Value) -> Outcome {
        self.apply(Event::Started { input });
        self.run_to_end()
    }

    /// Runs until the run ends or nothing more is scheduled.
    pub fn run_to_end(&mut self) -> Outcome {
        while !self.state.status.is_terminal() && self.events.len() < self.max_events {
            let Some((&(at, seq), _)) = self.schedule.iter().next() else {
                break;
            };
            let due = self.schedule.remove(&(at, seq)).expect("key was just read");
            self.now = self.now.max(at);
            match due {
                Due::Event(e) => self.apply(e),
                Due::Timer(t) => {
                    if self.timers.get(&t) == Some(&(at, seq)) {
                        self.timers.remove(&t);
                        self.apply(Event::TimerFired { timer: t });
                    }
                }
            }
        }
        self.outcome()
    }

    /// Applies one event now, carrying out its commands (unless a crash is scripted for it;
    /// a crashed or unacked event is then redelivered at once).
    pub fn apply(&mut self, event: Event) {
        self.deliver(event);
    }

    /// Applies one event and returns the commands it gave, carried out or lost.
    fn deliver(&mut self, event: Event) -> Vec<Command> {
        let index = self.events.len();
        let commands = self.commit(event.clone());
        let crashed = self.crash_after_commit.contains(&index);
        if crashed {
            self.lost.extend(commands.iter().cloned());
        } else {
            for c in &commands {
                self.carry_out(c);
            }
            self.commands.extend(commands.iter().cloned());
        }
        if crashed && self.outbox {
            // The redelivered event finds its commands in the outbox: they are carried out,
            // the event is not applied again.
            for c in &commands {
                self.carry_out(c);
            }
            self.commands.extend(commands.iter().cloned());
        } else if crashed || self.redeliver.contains(&index) {
            let again_index = self.events.len();
            let again = self.deliver(event);
            self.redeliveries.push((again_index, again));
        }
        commands
    }

    /// Applies one event to the state (checking the replay) and returns its commands.
    fn commit(&mut self, event: Event) -> Vec<Command> {
        self.events.push((self.now, event.clone()));
        let replica = self.check_replay.then(|| {
            let text = serde_json::to_string(&self.state).expect("state serialises");
            serde_json::from_str::<Execution>(&text).expect("state deserialises")
        });
        let before = self.check_replay.then(|| self.state.clone());
        let commands = super::apply(self.workflow, &mut self.state, event.clone(), self.now);
        if let Some(before) = before {
            // The shell tells an event that changed the run by its control state alone.
            assert!(
                self.state == before || !self.state.same_control(&before),
                "{event:?} changed a value of the run and nothing of its control state"
            );
        }
        if let Some(mut replica) = replica {
            let again = super::apply(self.workflow, &mut replica, event, self.now);
            assert_eq!(
                again, commands,
                "a replica resuming from serialised state diverged"
            );
            assert_eq!(replica, self.state, "replica state diverged");
        }
        let running = self
            .state
            .calls
            .values()
            .filter(|c| matches!(c.phase, super::state::CallPhase::Running { .. }))
            .count();
        self.max_running = self.max_running.max(running);
        commands
    }

    fn carry_out(&mut self, command: &Command) {
        match command {
            Command::Dispatch(d) => {
                let reply = match self.agents.get_mut(d.target.agent_name()) {
                    Some(script) => script(d),
                    None => {
                        let failure = Failure {
                            class: FailureClass::Unreachable,
                            message: format!(
                                "agent '{}' has no card on the mesh",
                                d.target.agent_name()
                            ),
                            kind: None,
                        };
                        let event = Event::CallFailed {
                            task: d.task.clone(),
                            attempt: d.attempt,
                            failure,
                        };
                        self.push(self.now, Due::Event(event));
                        return;
                    }
                };
                let event = match reply.answer {
                    Answer::Silence => return,
                    Answer::Events(events) => {
                        for (delay, event) in events {
                            let at = self.now.plus(reply.after).plus(delay);
                            self.push(at, Due::Event(event));
                        }
                        return;
                    }
                    Answer::Output(output) => Event::CallSucceeded {
                        task: d.task.clone(),
                        attempt: d.attempt,
                        output,
                    },
                    Answer::Fail(message, kind) => Event::CallFailed {
                        task: d.task.clone(),
                        attempt: d.attempt,
                        failure: Failure {
                            class: FailureClass::Failed,
                            message,
                            kind,
                        },
                    },
                };
                let at = self.now.plus(reply.after);
                if self.duplicate_answers {
                    self.push(at, Due::Event(event.clone()));
                }
                self.push(at, Due::Event(event));
            }
            Command::CancelTimer { timer } => {
                self.timers.remove(timer);
            }
            // One run alone: its slot is always free.
            Command::Admit { .. } => {
                self.push(self.now, Due::Event(Event::Admitted));
            }
            Command::Release { .. } => {}
            // The shell's gate; the simulator has none.
            Command::ReleaseSlot { .. } => {}
            Command::StartTimer { timer, at } => {
                let slot = self.push(*at, Due::Timer(timer.clone()));
                self.timers.insert(timer.clone(), slot);
            }
            Command::CancelCall { .. }
            | Command::Progress(_)
            | Command::RequestApproval { .. }
            | Command::Finish { .. } => {}
        }
    }

    /// The run's result so far.
    pub fn outcome(&self) -> Outcome {
        let finishes: Vec<&Command> = self
            .commands
            .iter()
            .filter(|c| matches!(c, Command::Finish { .. }))
            .collect();
        let (status, output, error) = match finishes.last() {
            Some(Command::Finish {
                status,
                output,
                error,
            }) => (Some(*status), output.clone(), error.clone()),
            _ => (None, None, None),
        };
        Outcome {
            status,
            output,
            error,
            finishes: finishes.len(),
        }
    }

    /// Timers armed and not yet fired or disarmed.
    pub fn armed_timers(&self) -> Vec<TimerId> {
        let mut timers: Vec<TimerId> = self.timers.keys().cloned().collect();
        timers.sort();
        timers
    }

    /// Every dispatch so far.
    pub fn dispatches(&self) -> Vec<&Dispatch> {
        self.commands
            .iter()
            .filter_map(|c| match c {
                Command::Dispatch(d) => Some(d),
                _ => None,
            })
            .collect()
    }
}

/// How a simulated run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The final status (`None`: the run has not ended).
    pub status: Option<RunStatus>,
    /// The output, on success.
    pub output: Option<Value>,
    /// The error, on failure or cancel.
    pub error: Option<RunError>,
    /// How many `Finish` commands were issued (must be exactly one).
    pub finishes: usize,
}
