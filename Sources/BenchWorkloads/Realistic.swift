import Foundation

// Workloads the churn bench never used (issue #26): they measure what tracking costs where
// blocks live long, where Foundation allocates, and where several threads allocate at once.
// `make bench` runs each in bench-workload, alone and under the recorder and the peers.

/// A record as a service would decode it: strings, numbers, an optional, a nested array.
public struct Order: Codable {
  public var id: Int
  public var customer: String
  public var total: Double
  public var note: String?
  public var items: [Int]
}

/// Encodes `count` orders to JSON and decodes them back; returns a checksum of the result.
@inline(never)
public func jsonRoundTrip(count: Int) -> Int {
  let orders = (0..<count).map {
    Order(
      id: $0, customer: "customer \($0 % 997)", total: Double($0) * 1.25, note: $0 % 3 == 0 ? "gift" : nil,
      items: [$0, $0 &+ 1, $0 &+ 2])
  }
  guard let data = try? JSONEncoder().encode(orders), let decoded = try? JSONDecoder().decode([Order].self, from: data)
  else { return -1 }
  return decoded.reduce(data.count) { $0 &+ $1.id &+ $1.items.count }
}

/// `threads` threads, each building and dropping trees of `nodes` nodes `rounds` times (the
/// blocks of a tree live until its last node is made, then all die); returns the sum of the
/// trees' values.
@inline(never)
public func threadedTreeChurn(threads: Int, rounds: Int, nodes: Int) -> Int {
  // Each worker writes its own element: no lock, nothing shared but the buffer.
  struct Sums: @unchecked Sendable { let buffer: UnsafeMutableBufferPointer<Int> }
  let sums = Sums(buffer: .allocate(capacity: threads))
  sums.buffer.initialize(repeating: 0)
  defer { sums.buffer.deallocate() }
  DispatchQueue.concurrentPerform(iterations: threads) { thread in
    var sum = 0
    for _ in 0..<rounds { sum &+= buildTrees(trees: 1, nodes: nodes) }
    sums.buffer[thread] = sum
  }
  return sums.buffer.reduce(0, &+)
}

/// The workloads by name, each run once; what `bench-workload NAME` runs.
public enum AllocationWorkload: String, CaseIterable, Sendable {
  case churn, trees, json, threads

  /// What the bench's table says the workload is.
  public var summary: String {
    switch self {
    case .churn: "2.4 M malloc+free that die young, at stack depth ~35"
    case .trees: "3 trees of 200 k class instances and a dictionary, all kept to the end"
    case .json: "JSONEncoder and JSONDecoder on 50 k Codable structs"
    case .threads: "4 threads (Dispatch workers), each building and dropping 100 trees of 5 k nodes"
    }
  }

  public func run() {
    switch self {
    case .churn:
      var kept: [ChurnNode] = []
      BenchWorkloads.churn(depth: 30, operations: churnOperations, kept: &kept)
      withExtendedLifetime(kept) {}
    case .trees: blackHole(buildTrees(trees: 3, nodes: 200_000))
    case .json: blackHole(jsonRoundTrip(count: 50_000))
    case .threads: blackHole(threadedTreeChurn(threads: 4, rounds: 100, nodes: 5_000))
    }
  }
}

/// Starts a thread that does nothing until the process ends (bench-workload's
/// BENCH_IDLE_THREAD): in a library module, so its body is not the main actor's.
public func startIdleThread() {
  var idle = pthread_t()
  _ = pthread_create(
    &idle, nil,
    { _ in
      while true { pause() }
    }, nil)
}
