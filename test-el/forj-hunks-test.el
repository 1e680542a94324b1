;;; forj-hunks-test.el --- Approving a change in part, hunk by hunk, against the real worker  -*- lexical-binding: t; -*-

;;; Commentary:

;; In the review, `+' approves and `-' (or `_' with a reason) drops the
;; hunk at point; `M-n' and `M-p' move between hunks.  The worker writes
;; only the approved hunks, the model is told which were applied and
;; which dropped (and why) and what the file holds there now, and
;; `forj-undo' puts the file back.

;;; Code:

(require 'ert)
(require 'forj-tools)
(require 'forj-undo)
(require 'forj-epc-test)

(defconst forj-hunks-test--thirty
  (mapconcat (lambda (n) (format "line %d\n" n)) (number-sequence 1 30) "")
  "The file the tests change: thirty numbered lines.")

(defun forj-hunks-test--read (root path)
  "The text of PATH in ROOT."
  (with-temp-buffer (insert-file-contents (expand-file-name path root)) (buffer-string)))

(defun forj-hunks-test--review (root calls)
  "Run CALLS (JSON texts) in ROOT; return (REVIEW . RESULTS-FUNCTION).
The review buffer is shown alone in the selected window, with the
decision keys acting at once."
  (let ((buffer (generate-new-buffer "*forj-hunks-test*"))
        (results 'waiting))
    (let ((stale (get-buffer "*forj-review*")))
      (when stale (kill-buffer stale)))
    (with-current-buffer buffer
      (dolist (call calls) (insert "```tool-call\n" call "\n```\n"))
      (forj-tools-run-region (point-min) (point-max) (lambda (r) (setq results r)) root))
    (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
    (delete-other-windows)
    (switch-to-buffer "*forj-review*")
    (cons (get-buffer "*forj-review*")
          (lambda () (unless (eq results 'waiting) results)))))

(defun forj-hunks-test--results (run)
  "Wait for RUN's results and return them."
  (should (forj-test--wait-for (cdr run) 30))
  (funcall (cdr run)))

(defun forj-hunks-test--keys (keys)
  "Type KEYS (a `kbd' string) in the review."
  (execute-kbd-macro (kbd keys)))

(defun forj-hunks-test--result (results id)
  "The result of call ID among RESULTS."
  (cl-find id results :key (lambda (r) (plist-get r :id)) :test #'equal))

(ert-deftest forj-test-hunks-drop-one-of-three-writes-two-tells-the-model-and-undo-restores ()
  "Dropping one of three hunks with a reason writes the other two; the model is told; undo restores."
  (forj-test-with-project `(("a.txt" . ,forj-hunks-test--thirty))
    (let* ((forj-review-input-delay 0)
           (run (forj-hunks-test--review
                 root
                 (list "{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}"
                       (json-serialize
                        (list :id "m" :name "multi_edit"
                              :args (list :edits
                                          (vconcat
                                           (mapcar (lambda (n)
                                                     (list :path "a.txt" :start_line n :end_line n
                                                           :new_content (format "LINE %d\n" n)))
                                                   '(3 15 27))))))))))
      (with-current-buffer (car run)
        ;; Every hunk of the call shows its state on a line of its own.
        (should (string-match-p "^\\[ \\] hunk 1 of 3 in a.txt$" (buffer-string)))
        (should (string-match-p "^\\[ \\] hunk 3 of 3 in a.txt$" (buffer-string)))
        (goto-char (point-min))
        (forj-hunks-test--keys "M-n M-n")
        (should (equal (get-text-property (point) 'forj-review-hunk) '("a.txt" . 1)))
        (forj-hunks-test--keys "M-p")
        (should (equal (get-text-property (point) 'forj-review-hunk) '("a.txt" . 0)))
        (forj-hunks-test--keys "M-n")
        (execute-kbd-macro (vconcat (kbd "_") "line 15 stays" (kbd "RET")))
        (let ((text (buffer-string)))
          (should (string-match-p "^\\[in part\\] " text))
          (should (string-match-p "approved in part: 2 of 3 hunks written; dropped: hunk 2 of a.txt" text))
          (should (string-match-p "^\\[\\+\\] hunk 1 of 3 in a.txt: approved$" text))
          (should (string-match-p "^\\[-\\] hunk 2 of 3 in a.txt: dropped; reason: line 15 stays$" text))
          (should (string-match-p "^\\[\\+\\] hunk 3 of 3 in a.txt: approved$" text)))
        ;; The dropped hunk's lines are drawn struck through, the others not.
        (goto-char (point-min))
        (search-forward "+LINE 15")
        (should (memq 'forj-review-dropped-hunk (ensure-list (get-text-property (point) 'face))))
        (search-forward "+LINE 27")
        (should-not (memq 'forj-review-dropped-hunk (ensure-list (get-text-property (point) 'face))))
        (forj-hunks-test--keys "C-c C-c"))
      (let* ((results (forj-hunks-test--results run))
             (result (plist-get (forj-hunks-test--result results "m") :result))
             (hunks (append (plist-get (aref (plist-get result :files) 0) :hunks) nil)))
        (should (eq (plist-get (forj-hunks-test--result results "m") :ok) t))
        (should (equal (forj-hunks-test--read root "a.txt")
                       (replace-regexp-in-string
                        "^line \\(3\\|27\\)$" "LINE \\1" forj-hunks-test--thirty)))
        ;; What the model gets: what was applied, what was dropped and why, and the text there now.
        (should (eq (plist-get result :partly_applied) t))
        (should (string-match-p "approved only part of your change" (plist-get result :note)))
        (should (equal (mapcar (lambda (h) (plist-get h :state)) hunks) '("applied" "dropped" "applied")))
        (should (equal (plist-get (nth 1 hunks) :reason) "line 15 stays"))
        (should (equal (plist-get (nth 1 hunks) :lines) "12-18"))
        (should (equal (plist-get (nth 1 hunks) :now)
                       (mapconcat (lambda (n) (format "line %d\n" n)) (number-sequence 12 18) "")))
        (should (string-match-p "+LINE 3\n" (plist-get result :preview)))
        (should-not (string-match-p "LINE 15" (plist-get result :preview))))
      ;; Undo puts the file back as it was.
      (make-directory (expand-file-name ".git" root))
      (let ((default-directory root))
        (with-temp-buffer
          (setq default-directory root)
          (forj-undo))
        (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
        (with-current-buffer "*forj-review*"
          (forj-review-approve-all)
          (forj-review-commit))
        (should (forj-test--wait-for
                 (lambda () (equal (forj-hunks-test--read root "a.txt") forj-hunks-test--thirty))
                 30))))))

(ert-deftest forj-test-hunks-apply-patch-of-two-files-with-one-file-dropped ()
  "A multi-file apply_patch is decided hunk by hunk across files: one file's hunk dropped, the other written."
  (forj-test-with-project '(("a.txt" . "alpha\n") ("b.txt" . "beta\n"))
    (let* ((forj-review-input-delay 0)
           (run (forj-hunks-test--review
                 root
                 (list "{\"id\": \"ra\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}"
                       "{\"id\": \"rb\", \"name\": \"read_file\", \"args\": {\"path\": \"b.txt\"}}"
                       (json-serialize
                        (list :id "p" :name "apply_patch"
                              :args (list :patch (concat "*** Begin Patch\n"
                                                         "*** Update File: a.txt\n@@\n-alpha\n+ALPHA\n"
                                                         "*** Update File: b.txt\n@@\n-beta\n+BETA\n"
                                                         "*** End Patch\n"))))))))
      (with-current-buffer (car run)
        (should (string-match-p "^\\[ \\] hunk 1 of 1 in a.txt$" (buffer-string)))
        (should (string-match-p "^\\[ \\] hunk 1 of 1 in b.txt$" (buffer-string)))
        (goto-char (point-min))
        (forj-hunks-test--keys "M-n M-n")
        (should (equal (get-text-property (point) 'forj-review-hunk) '("b.txt" . 0)))
        ;; `-' on a call not yet decided: all but this hunk.
        (forj-hunks-test--keys "-")
        (should (string-match-p "^\\[\\+\\] hunk 1 of 1 in a.txt: approved$" (buffer-string)))
        (should (string-match-p "^\\[-\\] hunk 1 of 1 in b.txt: dropped$" (buffer-string)))
        (forj-hunks-test--keys "C-c C-c"))
      (let* ((results (forj-hunks-test--results run))
             (result (plist-get (forj-hunks-test--result results "p") :result))
             (files (append (plist-get result :files) nil)))
        (should (eq (plist-get (forj-hunks-test--result results "p") :ok) t))
        (should (equal (forj-hunks-test--read root "a.txt") "ALPHA\n"))
        (should (equal (forj-hunks-test--read root "b.txt") "beta\n"))
        (should (equal (mapcar (lambda (f) (list (plist-get f :path)
                                                 (plist-get (aref (plist-get f :hunks) 0) :state)))
                               files)
                       '(("a.txt" "applied") ("b.txt" "dropped"))))
        (should (equal (plist-get (aref (plist-get (nth 1 files) :hunks) 0) :now) "beta\n"))))))

(ert-deftest forj-test-hunks-every-hunk-dropped-is-a-denial ()
  "Dropping every hunk of a call denies it, with the reasons given; nothing is written."
  (forj-test-with-project '(("a.txt" . "alpha\n") ("b.txt" . "beta\n"))
    (let* ((forj-review-input-delay 0)
           (run (forj-hunks-test--review
                 root
                 (list "{\"id\": \"ra\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}"
                       "{\"id\": \"rb\", \"name\": \"read_file\", \"args\": {\"path\": \"b.txt\"}}"
                       "{\"id\": \"m\", \"name\": \"multi_edit\", \"args\": {\"edits\": [{\"path\": \"a.txt\", \"start_line\": 1, \"end_line\": 1, \"new_content\": \"A\\n\"}, {\"path\": \"b.txt\", \"start_line\": 1, \"end_line\": 1, \"new_content\": \"B\\n\"}]}}"))))
      (with-current-buffer (car run)
        (goto-char (point-min))
        (forj-hunks-test--keys "M-n")
        (execute-kbd-macro (vconcat (kbd "_") "not a" (kbd "RET")))
        (forj-hunks-test--keys "M-n")
        (should (equal (get-text-property (point) 'forj-review-hunk) '("b.txt" . 0)))
        (forj-hunks-test--keys "-")
        (should (string-match-p "^\\[denied\\] " (buffer-string)))
        (should (string-match-p "reason: not a" (buffer-string)))
        (forj-hunks-test--keys "C-c C-c"))
      (let ((m (forj-hunks-test--result (forj-hunks-test--results run) "m")))
        (should (eq (plist-get m :ok) :false))
        (should (string-match-p "The user denied this call: not a"
                                (plist-get (plist-get m :error) :message))))
      (should (equal (forj-hunks-test--read root "a.txt") "alpha\n"))
      (should (equal (forj-hunks-test--read root "b.txt") "beta\n")))))

(defun forj-hunks-test--fake-header-run (root)
  "Review a multi_edit in ROOT whose f.txt diff holds lines that read as g.txt's header.
Line 1 \"-- x\" becomes \"++ b/g.txt\", line 20 becomes \"EVIL\", and
g.txt's one line becomes \"G\"."
  (forj-hunks-test--review
   root
   (list "{\"id\": \"rf\", \"name\": \"read_file\", \"args\": {\"path\": \"f.txt\"}}"
         "{\"id\": \"rg\", \"name\": \"read_file\", \"args\": {\"path\": \"g.txt\"}}"
         (json-serialize
          (list :id "m" :name "multi_edit"
                :args (list :edits
                            (vector
                             (list :path "f.txt" :start_line 1 :end_line 1
                                   :new_content "++ b/g.txt\n")
                             (list :path "f.txt" :start_line 20 :end_line 20
                                   :new_content "EVIL\n")
                             (list :path "g.txt" :start_line 1 :end_line 1
                                   :new_content "G\n"))))))))

(defconst forj-hunks-test--fake-header-files
  `(("f.txt" . ,(concat "-- x\n" (mapconcat (lambda (n) (format "f %d\n" n))
                                             (number-sequence 2 30) "")))
    ("g.txt" . "g 1\n"))
  "A project for `forj-hunks-test--fake-header-run'.")

(ert-deftest forj-test-hunks-attack-removed-and-added-lines-that-read-as-a-file-header ()
  "A removed line \"-- x\" above an added \"++ b/g.txt\" reads \"--- x\" / \"+++ b/g.txt\":
it is a hunk's body, not a file header.  The hunks after it keep their
own file and number, so dropping one drops that one and nothing else."
  (forj-test-with-project forj-hunks-test--fake-header-files
    (let* ((forj-review-input-delay 0)
           (run (forj-hunks-test--fake-header-run root)))
      (with-current-buffer (car run)
        (should (string-match-p "^\\[ \\] hunk 2 of 2 in f.txt$" (buffer-string)))
        (goto-char (point-min))
        (search-forward "+EVIL")
        (should (equal (get-text-property (point) 'forj-review-hunk) '("f.txt" . 1)))
        (forj-hunks-test--keys "-")
        (should (string-match-p "^\\[-\\] hunk 2 of 2 in f.txt: dropped$" (buffer-string)))
        (should (string-match-p "^\\[\\+\\] hunk 1 of 1 in g.txt: approved$" (buffer-string)))
        (forj-hunks-test--keys "C-c C-c"))
      (let ((m (forj-hunks-test--result (forj-hunks-test--results run) "m")))
        (should (eq (plist-get m :ok) t)))
      (should-not (string-match-p "EVIL" (forj-hunks-test--read root "f.txt")))
      (should (string-prefix-p "++ b/g.txt\n" (forj-hunks-test--read root "f.txt")))
      (should (equal (forj-hunks-test--read root "g.txt") "G\n")))))

(ert-deftest forj-test-hunks-attack-fake-header-does-not-take-the-place-of-an-edited-file ()
  "After g.txt is edited in ediff, its piece of the diff is replaced by the
user's diff: the real g.txt piece, not the lines inside f.txt's hunk that
read as g.txt's header (that would hide f.txt's later hunks from view)."
  (forj-test-with-project forj-hunks-test--fake-header-files
    (let* ((forj-review-input-delay 0)
           (run (forj-hunks-test--fake-header-run root)))
      (with-current-buffer (car run)
        (forj-review-modify "m" "g.txt" "GG\n")
        (forj-review--set-user-diff "m" "g.txt" "--- a/g.txt\n+++ b/g.txt\n@@ -1 +1 @@\n-g 1\n+GG\n")
        (forj-review--render)
        (let ((text (buffer-string)))
          (should (string-match-p "^\\+EVIL$" text))
          (should (string-match-p "^\\+GG$" text))
          (should-not (string-match-p "^\\+G$" text)))
        ;; f.txt's hunks can still be decided one by one.
        (goto-char (point-min))
        (search-forward "+EVIL")
        (forj-hunks-test--keys "-")
        (forj-hunks-test--keys "C-c C-c"))
      (forj-hunks-test--results run)
      (should-not (string-match-p "EVIL" (forj-hunks-test--read root "f.txt")))
      (should (equal (forj-hunks-test--read root "g.txt") "GG\n")))))

(ert-deftest forj-test-hunks-attack-a-call-approved-in-part-gets-no-grant ()
  "A grant key on a call approved in part is refused: the hunk decisions
stay, and no grant would let later calls like it run whole."
  (forj-test-with-project `(("a.txt" . ,forj-hunks-test--thirty))
    (let* ((forj-review-input-delay 0)
           (run (forj-hunks-test--review
                 root
                 (list "{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}"
                       (json-serialize
                        (list :id "m" :name "multi_edit"
                              :args (list :edits
                                          (vector
                                           (list :path "a.txt" :start_line 3 :end_line 3 :new_content "X\n")
                                           (list :path "a.txt" :start_line 27 :end_line 27
                                                 :new_content "Y\n")))))))))
      (with-current-buffer (car run)
        (goto-char (point-min))
        (forj-hunks-test--keys "M-n -")
        (should (string-match-p "^\\[in part\\] " (buffer-string)))
        (should-error (forj-review-grant "m" "session" "multi_edit") :type 'user-error)
        (should-not (gethash "m" forj-review--grants))
        (should (string-match-p "^\\[-\\] hunk 1 of 2 in a.txt: dropped$" (buffer-string)))
        (forj-hunks-test--keys "C-c C-c"))
      (should (eq (plist-get (forj-hunks-test--result (forj-hunks-test--results run) "m") :ok) t))
      (should (equal (forj-hunks-test--read root "a.txt")
                     (replace-regexp-in-string "^line 27$" "Y" forj-hunks-test--thirty))))))

(ert-deftest forj-test-hunks-dropping-a-hunk-of-a-denied-call-approves-nothing ()
  "`-' on a hunk of a call the user denied keeps it denied (it does not
approve the other hunks); `+' then approves that hunk alone."
  (forj-test-with-project `(("a.txt" . ,forj-hunks-test--thirty))
    (let* ((forj-review-input-delay 0)
           (run (forj-hunks-test--review
                 root
                 (list "{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}"
                       (json-serialize
                        (list :id "m" :name "multi_edit"
                              :args (list :edits
                                          (vconcat
                                           (mapcar (lambda (n)
                                                     (list :path "a.txt" :start_line n :end_line n
                                                           :new_content (format "LINE %d\n" n)))
                                                   '(3 15 27))))))))))
      (with-current-buffer (car run)
        (goto-char (point-min))
        (forj-hunks-test--keys "M-n d -")
        (should (string-match-p "^\\[denied\\] " (buffer-string)))
        (should-not (string-match-p "^\\[\\+\\] hunk" (buffer-string)))
        (forj-hunks-test--keys "M-n M-n +")
        (should (string-match-p "^\\[in part\\] " (buffer-string)))
        (should (string-match-p "^\\[\\+\\] hunk 3 of 3 in a.txt: approved$" (buffer-string)))
        (should (string-match-p "^\\[-\\] hunk 1 of 3 in a.txt: dropped$" (buffer-string)))
        (should (string-match-p "^\\[-\\] hunk 2 of 3 in a.txt: dropped$" (buffer-string)))
        (forj-hunks-test--keys "C-c C-c"))
      (forj-hunks-test--results run)
      (should (equal (forj-hunks-test--read root "a.txt")
                     (replace-regexp-in-string "^line 27$" "LINE 27" forj-hunks-test--thirty))))))

(ert-deftest forj-test-hunks-ediff-after-a-dropped-hunk-asks-first ()
  "Editing a file in ediff after dropping one of its hunks asks first: ediff
shows the whole proposal, and the dropped hunk would come back with the
user's text.  Saying no keeps the hunk decisions and opens nothing."
  (forj-test-with-project `(("a.txt" . ,forj-hunks-test--thirty))
    (let* ((forj-review-input-delay 0)
           (asked nil)
           (run (forj-hunks-test--review
                 root
                 (list "{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}"
                       (json-serialize
                        (list :id "m" :name "multi_edit"
                              :args (list :edits
                                          (vector
                                           (list :path "a.txt" :start_line 3 :end_line 3 :new_content "X\n")
                                           (list :path "a.txt" :start_line 27 :end_line 27
                                                 :new_content "Y\n")))))))))
      (with-current-buffer (car run)
        (goto-char (point-min))
        (forj-hunks-test--keys "M-n -")
        (cl-letf (((symbol-function 'yes-or-no-p)
                   (lambda (prompt) (setq asked prompt) nil)))
          (forj-review-edit)
          (should (forj-test--wait-for (lambda () asked) 30)))
        (should (string-match-p "You dropped hunk 1 of a.txt" asked))
        (should-not (get-buffer "*forj-proposed: a.txt*"))
        (should (string-match-p "^\\[-\\] hunk 1 of 2 in a.txt: dropped$" (buffer-string)))
        (forj-hunks-test--keys "C-c C-c"))
      (forj-hunks-test--results run)
      (should (equal (forj-hunks-test--read root "a.txt")
                     (replace-regexp-in-string "^line 27$" "Y" forj-hunks-test--thirty))))))

(provide 'forj-hunks-test)
;;; forj-hunks-test.el ends here
