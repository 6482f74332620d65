//! Passes a token around all ranks `laps` times (default 10) and checks it:
//! every rank adds 1 on each pass, so rank 0 must get `laps * size` back.
//!
//! `tmpirun -n 4 target/release/examples/ring [laps]`

fn main() -> Result<(), tmpi::Error> {
    let laps: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let mpi = tmpi::init()?;
    let world = mpi.world();
    let (rank, size) = (world.rank(), world.size());
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;
    let t0 = mpi.wtime();
    let mut token = [0u64; 1];
    for lap in 0..laps {
        if rank == 0 {
            token[0] += 1;
            world.send(&token, next, lap as i32)?;
            world.recv(&mut token, prev, lap as i32)?;
        } else {
            world.recv(&mut token, prev, lap as i32)?;
            token[0] += 1;
            world.send(&token, next, lap as i32)?;
        }
    }
    if rank == 0 {
        let expect = laps * size as u64;
        let dt = mpi.wtime() - t0;
        println!(
            "ring: {size} ranks, {laps} laps, token = {} (expected {expect}) {} in {:.1} us per hop",
            token[0],
            if token[0] == expect { "OK" } else { "WRONG" },
            dt * 1e6 / (laps as f64 * size as f64)
        );
        if token[0] != expect {
            std::process::exit(1);
        }
    }
    Ok(())
}
