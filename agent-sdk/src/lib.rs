//! Library for writing agents on the mesh (see issue 3).
