//! Rank 0 serves requests from every other rank, receiving with
//! `ANY_SOURCE` / `ANY_TAG` and probing for the size first; each client
//! sends `k` requests (a vector of numbers, tag = operation) and checks the
//! answers. Tag 0 = sum, 1 = max; tag 2 tells the server the client is done.
//!
//! `tmpirun -n 4 target/release/examples/wildcard_server`

const SUM: i32 = 0;
const MAX: i32 = 1;
const DONE: i32 = 2;

fn main() -> Result<(), tmpi::Error> {
    let mpi = tmpi::init()?;
    let world = mpi.world();
    let (rank, size) = (world.rank(), world.size());
    let k = 50;
    if rank == 0 {
        let mut done = 0;
        let mut served = 0;
        while done < size - 1 {
            let st = world.probe(tmpi::ANY_SOURCE, tmpi::ANY_TAG)?;
            let mut req = vec![0i64; st.count::<i64>()];
            let st = world.recv(&mut req, st.source(), st.tag())?;
            match st.tag() {
                SUM => world.send(&[req.iter().sum::<i64>()], st.source(), SUM)?,
                MAX => world.send(
                    &[req.iter().copied().max().unwrap_or(i64::MIN)],
                    st.source(),
                    MAX,
                )?,
                _ => done += 1,
            }
            served += 1;
        }
        println!(
            "wildcard_server: served {served} requests from {} clients OK",
            size - 1
        );
    } else {
        for i in 0..k {
            let v: Vec<i64> = (0..(i % 17 + 1))
                .map(|j| (j * rank as i64 + i) % 101)
                .collect();
            let op = if i % 2 == 0 { SUM } else { MAX };
            world.send(&v, 0, op)?;
            let mut ans = [0i64];
            world.recv(&mut ans, 0, op)?;
            let expect = if op == SUM {
                v.iter().sum()
            } else {
                *v.iter().max().unwrap()
            };
            if ans[0] != expect {
                eprintln!(
                    "wildcard_server: rank {rank} request {i}: got {} expected {expect}",
                    ans[0]
                );
                std::process::exit(1);
            }
        }
        world.send::<i64>(&[], 0, DONE)?;
    }
    Ok(())
}
