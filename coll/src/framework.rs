//! The coll framework: components, per-communicator modules, and the
//! function table built by selection.
//!
//! Lifecycle (Open MPI's, see `docs/coll.md`):
//! 1. [`CollFramework::open`] registers the `coll` selection list and every
//!    component's parameters, and opens the components the list allows.
//! 2. For each new communicator, [`CollFramework::select`] asks every open
//!    component whether it wants the communicator and at what priority
//!    ([`CollComponent::comm_query`]). The modules are enabled from lowest
//!    to highest priority; for each collective the highest-priority module
//!    providing it wins and keeps the lower providers as its underlying
//!    chain ([`Underlying`]) to delegate to.
//! 3. A collective without any provider makes communicator creation fail
//!    with [`CollError::NoProvider`] naming it.

use std::fmt;
use std::sync::Arc;

use tmpi_base::component::ComponentDescriptor;
use tmpi_base::mca::{Registry, SelectionList};

use crate::algo::{Call, CollKind, Pos};
use crate::schedule::Schedule;
use crate::{CollError, Result};

/// What a component may look at when deciding whether it wants a communicator.
#[derive(Debug, Clone)]
pub struct CommShape {
    /// This process's rank.
    pub rank: u32,
    /// World rank of every member.
    pub world: Arc<[u32]>,
    /// Node label of every member (same label = same node).
    pub nodes: Vec<u32>,
    /// Whether the transport's ranks are processes (or threads) that can
    /// map one shared-memory segment when they are on one node.
    pub shared_memory: bool,
}

impl CommShape {
    /// Number of members.
    pub fn size(&self) -> u32 {
        self.world.len() as u32
    }

    /// Whether every member is on one node.
    pub fn single_node(&self) -> bool {
        self.nodes.windows(2).all(|w| w[0] == w[1])
    }
}

/// The lower-priority providers of a function, for delegation.
#[derive(Clone, Copy)]
pub struct Underlying<'a> {
    chain: &'a [Arc<dyn CollModule>],
}

impl<'a> Underlying<'a> {
    /// Builds the schedule with the next provider down the chain.
    pub fn build(&self, call: &Call, pos: Pos) -> Result<Schedule> {
        match self.chain.split_first() {
            Some((m, rest)) => m.build(call, pos, Underlying { chain: rest }),
            None => Err(CollError::Intern(format!(
                "no underlying provider of {}",
                call.kind
            ))),
        }
    }
}

/// A component's per-communicator module.
pub trait CollModule: Send + Sync + fmt::Debug {
    /// Name of the component that made it.
    fn component(&self) -> &'static str;
    /// Whether it provides `kind`.
    fn provides(&self, kind: CollKind) -> bool;
    /// Called once, in ascending priority order, before the communicator is
    /// used; may precompute. `shape` is the communicator.
    fn enable(&self, _shape: &CommShape) -> Result<()> {
        Ok(())
    }
    /// Builds this rank's schedule for `call`; `under` are the providers of
    /// the same function with lower priority.
    fn build(&self, call: &Call, pos: Pos, under: Underlying<'_>) -> Result<Schedule>;
    /// Name of the algorithm it would use for `call` (for logs and tests).
    fn algorithm(&self, _call: &Call, _pos: Pos) -> &'static str {
        "default"
    }
    /// Largest vector (bytes; the block for allgather and alltoall) of a blocking barrier, bcast, reduce, allreduce, allgather
    /// or alltoall call that may run as a direct algorithm (`crate::direct`)
    /// instead of this module's schedule; 0 (the default) = never. A module
    /// returning more than 0 for `kind` must build, for such calls, exactly
    /// the schedule the direct algorithm mirrors (same messages, same
    /// reduction order), so ranks taking either path interoperate.
    fn direct_max(&self, _kind: CollKind) -> usize {
        0
    }
    /// The communicator's shared-memory state when this module runs small
    /// blocking collectives through a node segment (`sm`).
    fn node_coll(&self) -> Option<Arc<crate::component::sm::NodeColl>> {
        None
    }
    /// Whether this module's message path (schedules and direct
    /// algorithms) is entirely its underlying module's (`sm`): the table
    /// then takes the direct limits from the next module down.
    fn passes_messages_down(&self) -> bool {
        false
    }
}

/// A coll component, opened once per process with its parameters resolved.
pub trait CollComponent: Send + Sync {
    /// Its static description (name, default priority, parameters).
    fn descriptor(&self) -> &'static ComponentDescriptor;
    /// Whether it wants this communicator: `Some((priority, module))` or `None`.
    fn comm_query(&self, shape: &CommShape) -> Result<Option<(i64, Arc<dyn CollModule>)>>;
}

/// The selected providers of every collective of one communicator: for each
/// kind, the chain of modules from highest to lowest priority.
#[derive(Debug, Clone)]
pub struct FnTable {
    chains: Vec<Vec<Arc<dyn CollModule>>>,
}

impl FnTable {
    /// Builds this rank's schedule for `call` with the winning module.
    pub fn build(&self, call: &Call, pos: Pos) -> Result<Schedule> {
        let chain = &self.chains[call.kind.index()];
        Underlying { chain }.build(call, pos)
    }

    /// Component names providing `kind`, highest priority first.
    pub fn providers(&self, kind: CollKind) -> Vec<&'static str> {
        self.chains[kind.index()]
            .iter()
            .map(|m| m.component())
            .collect()
    }

    /// Largest blocking `kind` call (bytes) the winner lets run as a direct
    /// algorithm ([`CollModule::direct_max`]); when the winner passes its
    /// message path down ([`CollModule::passes_messages_down`]), the
    /// first module below that does not.
    pub fn direct_max(&self, kind: CollKind) -> usize {
        self.chains[kind.index()]
            .iter()
            .find(|m| !m.passes_messages_down())
            .map_or(0, |m| m.direct_max(kind))
    }

    /// The winner's shared-memory state for `kind`, if the winner is `sm`.
    pub fn node_coll(&self, kind: CollKind) -> Option<Arc<crate::component::sm::NodeColl>> {
        self.chains[kind.index()]
            .first()
            .and_then(|m| m.node_coll())
    }

    /// The algorithm the winner would use for `call`.
    pub fn algorithm(&self, call: &Call, pos: Pos) -> &'static str {
        self.chains[call.kind.index()]
            .first()
            .map_or("none", |m| m.algorithm(call, pos))
    }
}

/// The coll framework of a process: its open components.
pub struct CollFramework {
    components: Vec<Box<dyn CollComponent>>,
    selection: SelectionList,
}

impl fmt::Debug for CollFramework {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollFramework")
            .field(
                "components",
                &self
                    .components
                    .iter()
                    .map(|c| c.descriptor().name)
                    .collect::<Vec<_>>(),
            )
            .field("selection", &self.selection.to_string())
            .finish()
    }
}

/// Descriptors of every coll component, for `tmpi_info` and the selection list.
pub fn descriptors() -> [&'static ComponentDescriptor; 4] {
    [
        &crate::component::basic::DESCRIPTOR,
        &crate::component::tuned::DESCRIPTOR,
        &crate::component::sm::DESCRIPTOR,
        &crate::component::self_::DESCRIPTOR,
    ]
}

impl CollFramework {
    /// Registers the `coll` selection list and the components' parameters in
    /// `reg`, and opens the components the list allows. A name in the list
    /// that is no coll component is an error.
    pub fn open(reg: &Registry) -> Result<Self> {
        let sel = crate::register_selection(reg)?;
        reg.register_verbose("coll", "base")?;
        let selection = sel.value();
        let mut comps = tmpi_base::component::ComponentRegistry::new();
        for d in descriptors() {
            comps.add(d)?;
        }
        comps.register_params(reg)?;
        let cands = comps.candidates("coll", &selection)?;
        let mut components: Vec<Box<dyn CollComponent>> = Vec::new();
        for c in cands {
            if !c.availability.is_available() {
                tracing::info!(target: "coll_base", "coll {} not used: {}", c.component.name, c.availability);
                continue;
            }
            let comp: Box<dyn CollComponent> = match c.component.name {
                "basic" => Box::new(crate::component::basic::Basic::open(reg)?),
                "tuned" => Box::new(crate::component::tuned::Tuned::open(reg)?),
                "self" => Box::new(crate::component::self_::SelfComponent::open(reg)?),
                "sm" => Box::new(crate::component::sm::Sm::open(reg)?),
                other => return Err(CollError::Intern(format!("unknown coll component {other}"))),
            };
            components.push(comp);
        }
        tracing::debug!(target: "coll_base", "coll components open: {:?}",
            components.iter().map(|c| c.descriptor().name).collect::<Vec<_>>());
        Ok(CollFramework {
            components,
            selection,
        })
    }

    /// Selects the modules of a communicator and builds its function table.
    pub fn select(&self, shape: &CommShape) -> Result<FnTable> {
        let mut mods: Vec<(i64, &'static str, Arc<dyn CollModule>)> = Vec::new();
        for c in &self.components {
            match c.comm_query(shape)? {
                Some((prio, m)) => mods.push((prio, c.descriptor().name, m)),
                None => {
                    tracing::trace!(target: "coll_base", "coll {} declines a communicator of size {}", c.descriptor().name, shape.size())
                }
            }
        }
        // Ascending priority (ties: name), enabled in that order; each newly
        // enabled module goes in front of the chains of what it provides.
        mods.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)));
        let mut chains: Vec<Vec<Arc<dyn CollModule>>> = vec![Vec::new(); CollKind::ALL.len()];
        for (prio, name, m) in mods {
            m.enable(shape)?;
            tracing::debug!(target: "coll_base", "coll {name} enabled at priority {prio}");
            for k in CollKind::ALL {
                if m.provides(k) {
                    chains[k.index()].insert(0, Arc::clone(&m));
                }
            }
        }
        if let Some(k) = CollKind::ALL.iter().find(|k| chains[k.index()].is_empty()) {
            return Err(CollError::NoProvider {
                function: k.name(),
                selection: self.selection.to_string(),
            });
        }
        Ok(FnTable { chains })
    }
}
