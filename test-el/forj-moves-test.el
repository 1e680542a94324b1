;;; forj-moves-test.el --- Buffers follow moved, deleted and patched files  -*- lexical-binding: t; -*-

;;; Commentary:

;; A scripted model session renames a module with `fs_move' and
;; `apply_patch' against the real worker: the review shows every file,
;; the buffer visiting the module follows it, the buffer of a patched
;; file shows the new text and the buffer of a deleted file is told.

;;; Code:

(require 'ert)
(require 'forj-moves)
(require 'forj-chat-test)

(defun forj-moves-test--block (call)
  "A tool-call block holding CALL, a plist."
  (forj-chat-test--block (json-serialize call)))

(ert-deftest forj-test-moves-rename-module-with-fs-move-and-apply-patch ()
  "A module renamed by fs_move + apply_patch: reviewed file by file, buffers follow."
  (let ((patch (concat "*** Begin Patch\n"
                       "*** Update File: main.py\n@@\n-import old_mod\n+import new_mod\n"
                       "*** Update File: README.md\n@@\n-See old_mod.\n+See new_mod.\n"
                       "*** Delete File: old_helper.py\n"
                       "*** End Patch\n")))
    (forj-chat-test-with-session
        '(("old_mod.py" . "def f():\n    return 1\n")
          ("old_helper.py" . "x = 1\n")
          ("main.py" . "import old_mod\nprint(old_mod.f())\n")
          ("README.md" . "See old_mod.\n"))
        (list (list :text (concat
                           (forj-moves-test--block
                            '(:id "r1" :name "read_file" :args (:path "main.py")))
                           (forj-moves-test--block
                            '(:id "r2" :name "read_file" :args (:path "README.md")))))
              (list :text (concat
                           (forj-moves-test--block
                            '(:id "m" :name "fs_move" :args (:src "old_mod.py" :dst "new_mod.py")))
                           (forj-moves-test--block
                            (list :id "p" :name "apply_patch" :args (list :patch patch)))))
              (list :text "Renamed."))
      (let ((module (find-file-noselect (expand-file-name "old_mod.py" root)))
            (main (find-file-noselect (expand-file-name "main.py" root)))
            (helper (find-file-noselect (expand-file-name "old_helper.py" root))))
        (unwind-protect
            (progn
              (forj-chat-test--say "Rename old_mod to new_mod.")
              (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
              (with-current-buffer "*forj-review*"
                (let ((text (buffer-string)))
                  ;; One piece per file: the move, both edits and the delete.
                  (dolist (shown '("old_mod.py" "new_mod.py" "main.py" "README.md"
                                   "old_helper.py" "+import new_mod" "+See new_mod."))
                    (should (string-search shown text))))
                (forj-review-approve-all)
                (forj-review-commit))
              (should (forj-chat-test--wait-idle))
              (should (string-match-p "Renamed\\." (buffer-string)))
              ;; The files.
              (should (file-exists-p (expand-file-name "new_mod.py" root)))
              (should-not (file-exists-p (expand-file-name "old_mod.py" root)))
              (should-not (file-exists-p (expand-file-name "old_helper.py" root)))
              ;; The module's buffer follows it, unmodified.
              (should (equal (buffer-file-name module) (expand-file-name "new_mod.py" root)))
              (should-not (buffer-modified-p module))
              ;; The patched file's buffer shows the new text.
              (should (string-prefix-p "import new_mod\n"
                                       (with-current-buffer main (buffer-string))))
              ;; The deleted file's buffer is told, and keeps its text.
              (with-current-buffer helper
                (should forj-moves-deleted)
                (should (string-match-p "forj deleted old_helper.py" (format "%s" header-line-format)))
                (should (equal (buffer-string) "x = 1\n"))))
          (dolist (buffer (list module main helper))
            (when (buffer-live-p buffer)
              (with-current-buffer buffer (set-buffer-modified-p nil))
              (kill-buffer buffer))))))))

(ert-deftest forj-test-moves-directory-move-and-delete-without-a-worker ()
  "Buffers under a moved directory follow; a deleted directory's buffers are told."
  (let* ((root (file-name-as-directory (make-temp-file "forj-moves-" t)))
         (old (expand-file-name "pkg/a.py" root)))
    (unwind-protect
        (progn
          (make-directory (expand-file-name "pkg" root))
          (write-region "a\n" nil old)
          (let ((buffer (find-file-noselect old)))
            (rename-file (expand-file-name "pkg" root) (expand-file-name "lib" root))
            (forj-moves-after-batch
             (list (cons nil (list :ok t :name "fs_move"
                                   :result (list :moved t :src "pkg" :dst "lib" :is_dir t))))
             root)
            (should (equal (buffer-file-name buffer) (expand-file-name "lib/a.py" root)))
            (delete-directory (expand-file-name "lib" root) t)
            (forj-moves-after-batch
             (list (cons nil (list :ok t :name "fs_delete"
                                   :result (list :deleted t :path "lib" :is_dir t))))
             root)
            (should (buffer-local-value 'forj-moves-deleted buffer))
            (kill-buffer buffer)))
      (delete-directory root t))))

(provide 'forj-moves-test)
;;; forj-moves-test.el ends here
